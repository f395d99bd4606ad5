#!/usr/bin/env bash
# The README's "Quick start without make", run as printed: a fresh clone of this repository's committed state in a
# temporary folder, a fresh virtual environment, the README's own lines (between its quickstart markers), then the
# README's SWEET-RL snippet (between its sweet-rl-snippet markers) with that environment's Python. Fails if any line
# fails. A CI step after `make test`; about 10 minutes on a 2-core machine, most of it pip.
#
#   scripts/check_quickstart.sh            # KEEP=1 keeps the temporary folder (printed) for a look afterwards
#
# Only what a new user would not have is isolated: the model cache ($COLBENCH_CACHE) and the Hugging Face cache start
# empty; pip's download cache is the machine's (a fresh user's pip downloads the same files).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/quickstart.XXXXXX")
if [[ "${KEEP:-0}" == 1 ]]; then
    echo "check_quickstart: keeping $work"
else
    trap 'rm -rf "$work"' EXIT
fi

# The lines of the fenced block that follows `<!-- NAME -->` in README.md (the block ends at its closing fence).
block() {
    python3 - "$1" "$2" <<'EOF'
import re, sys
readme, name = open(sys.argv[1], encoding="utf-8").read(), sys.argv[2]
found = re.search(r"<!-- " + re.escape(name) + r" -->\s*```[a-z]*\n(.*?)\n```", readme, re.S)
if not found:
    sys.exit(f"check_quickstart: README.md has no fenced block after <!-- {name} -->")
print(found.group(1))
EOF
}

git clone -q "$repo" "$work/colbench-gym"
cd "$work/colbench-gym"
block README.md quickstart > "$work/quickstart.sh"
block README.md sweet-rl-snippet > "$work/snippet.py"
echo "check_quickstart: in $PWD, the README's quick start:"
sed 's/^/    /' "$work/quickstart.sh"

export COLBENCH_CACHE="$work/cache" HF_HOME="$work/hf"
start=$SECONDS
# One shell for every line, as a user types them (the venv's activation carries to the next line); -e: the first
# failing line fails the check; -x: each line is echoed before it runs.
bash -exo pipefail -c "$(cat "$work/quickstart.sh"; echo; echo "python $work/snippet.py")"
echo "check_quickstart: passed in $((SECONDS - start)) s (README quick start and SWEET-RL snippet, fresh venv)"
