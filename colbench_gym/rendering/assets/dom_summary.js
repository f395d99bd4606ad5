// Compact description of what a rendered page shows, for a simulated human that cannot read pixels.
// Evaluated by the renderer after the page has settled, in an isolated world (the page's scripts cannot
// replace the built-ins used here), as `(source)(limits)`.
// Coordinates are CSS pixels in page space (scroll offsets added); colours are computed CSS colours.
// Forms and the document expose named elements as properties (`<input name="children">` makes
// `form.children` that input), so the DOM is read through the prototypes' own getters and methods.
(limits) => {
  const getter = (proto, name) => {
    const get = Object.getOwnPropertyDescriptor(proto, name).get;
    return (object) => get.call(object);
  };
  const method = (proto, name) => {
    const fn = proto[name];
    return (object, ...args) => fn.apply(object, args);
  };
  const childrenOf = getter(Element.prototype, "children");
  const tagOf = getter(Element.prototype, "tagName");
  const parentOf = getter(Node.prototype, "parentElement");
  const textOf = getter(Node.prototype, "textContent");
  const innerTextOf = getter(HTMLElement.prototype, "innerText");
  const rectOf = method(Element.prototype, "getBoundingClientRect");
  const attributeOf = method(Element.prototype, "getAttribute");
  const query = method(Document.prototype, "querySelectorAll");
  const bodyOf = getter(Document.prototype, "body");
  const rootOf = getter(Document.prototype, "documentElement");
  const titleOf = getter(Document.prototype, "title");
  const walkerOf = method(Document.prototype, "createTreeWalker");

  const maxTexts = limits.max_texts, maxBlocks = limits.max_blocks, maxImages = limits.max_images;
  const maxY = limits.max_height;
  const root = rootOf(document);
  const body = bodyOf(document) || root;
  const vw = root.clientWidth || window.innerWidth;
  const sx = window.scrollX, sy = window.scrollY;
  const SEMANTIC = new Set(["HEADER", "NAV", "MAIN", "FOOTER", "SECTION", "ASIDE", "ARTICLE", "FORM", "TABLE"]);
  const SKIP = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "HEAD", "META", "LINK", "TITLE"]);

  const box = (el) => {
    const r = rectOf(el);
    return { x: Math.round(r.left + sx), y: Math.round(r.top + sy), w: Math.round(r.width), h: Math.round(r.height) };
  };
  const visible = (el) => {
    if (!(el instanceof Element)) return false;
    const s = getComputedStyle(el);
    if (s.display === "none" || s.visibility === "hidden" || parseFloat(s.opacity) === 0) return false;
    const r = rectOf(el);
    return r.width > 0 && r.height > 0 && r.top + sy < maxY;
  };
  const transparent = (c) => c === "transparent" || /rgba\(.*,\s*0\)$/.test(c);
  const background = (el) => {
    for (let e = el; e && e.nodeType === 1; e = parentOf(e)) {
      const c = getComputedStyle(e).backgroundColor;
      if (!transparent(c)) return c;
    }
    return "rgb(255, 255, 255)";
  };
  const isBlock = (el) => !getComputedStyle(el).display.startsWith("inline") || el === body;
  const blockOf = (el) => {
    for (let e = el; e; e = parentOf(e)) if (isBlock(e)) return e;
    return body;
  };
  // Text a script wrote may hold lone surrogates, which are not Unicode: replaced, so the reply can be saved.
  const clean = (t) => t.toWellFormed().replace(/\s+/g, " ").trim();
  const tag = (el) => tagOf(el).toLowerCase();

  // Text blocks: the text of each block container, from the text nodes it owns directly
  // (text inside a nested block belongs to that block).
  const owned = new Map();
  const walker = walkerOf(document, body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = parentOf(node);
    const text = textOf(node);
    if (!parent || SKIP.has(tagOf(parent)) || !text.trim()) continue;
    if (!visible(parent)) continue;
    const block = blockOf(parent);
    if (!owned.has(block)) owned.set(block, []);
    owned.get(block).push(text);
  }
  const texts = [];
  for (const [el, parts] of owned) {
    const text = clean(parts.join(" "));
    if (!text) continue;
    const s = getComputedStyle(el);
    texts.push({ text: text.slice(0, 200), tag: tag(el), ...box(el),
                 font_size: parseFloat(s.fontSize), font_weight: parseInt(s.fontWeight, 10) || 400,
                 color: s.color, background: background(el) });
    if (texts.length >= maxTexts) break;
  }

  // Main blocks: wide or semantic containers near the top of the tree, with their colours.
  const blocks = [];
  const visit = (el, depth) => {
    if (blocks.length >= maxBlocks || depth > 4) return;
    for (const child of childrenOf(el)) {
      if (SKIP.has(tagOf(child)) || !visible(child)) continue;
      const b = box(child);
      const s = getComputedStyle(child);
      const ownBackground = !transparent(s.backgroundColor);
      const wide = b.w >= 0.25 * vw && b.h >= 24;
      if ((SEMANTIC.has(tagOf(child)) || (wide && (ownBackground || depth <= 2))) && isBlock(child)) {
        // Columns: substantial children sharing a row (a row of nav links is not a column layout).
        const kids = [...childrenOf(child)].filter(visible).map(box).filter((k) => k.w >= 0.12 * vw && k.h >= 32);
        let columns = kids.length ? 1 : 0;
        for (const k of kids) columns = Math.max(columns, kids.filter((o) => Math.abs(o.y - k.y) < 4).length);
        const text = child instanceof HTMLElement ? innerTextOf(child) : textOf(child);
        blocks.push({ tag: tag(child), depth, ...b, background: background(child),
                      own_background: ownBackground, color: s.color, columns,
                      text: clean(text || "").slice(0, 80) });
      }
      visit(child, depth + 1);
      if (blocks.length >= maxBlocks) return;
    }
  };
  visit(body, 1);

  const images = [];
  for (const img of query(document, "img, svg, video, canvas, iframe")) {
    if (!visible(img)) continue;
    images.push({ tag: tag(img), ...box(img), alt: clean(attributeOf(img, "alt") || "").slice(0, 60) });
    if (images.length >= maxImages) break;
  }

  return {
    title: clean(titleOf(document) || "").slice(0, 120),
    viewport_width: vw,
    width: Math.max(root.scrollWidth, body.scrollWidth),
    height: Math.max(root.scrollHeight, body.scrollHeight),
    background: background(body),
    font_family: getComputedStyle(body).fontFamily.slice(0, 120),
    texts, blocks, images,
    counts: {
      links: query(document, "a").length,
      buttons: query(document, "button, input[type=submit], input[type=button]").length,
      inputs: query(document, "input:not([type=submit]):not([type=button]), textarea, select").length,
      headings: query(document, "h1, h2, h3, h4, h5, h6").length,
    },
  };
}
