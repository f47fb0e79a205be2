// The site's search box: MiniSearch (minisearch.min.js, MIT licence) over the sections of
// every page (search-index.js), both loaded on first use by script tags, so that the
// search works offline and from file:// too. "/" jumps to the box; Enter opens the first hit.
(() => {
  const box = document.querySelector(".search input");
  const list = document.querySelector(".search ol");
  if (!box || !list) return;
  let engine = null;
  let loading = null;
  const load = (src) =>
    new Promise((resolve, reject) => {
      const s = document.createElement("script");
      s.src = src;
      s.onload = resolve;
      s.onerror = () => reject(new Error(`could not load ${src}`));
      document.head.append(s);
    });
  const ready = () =>
    (loading ??= Promise.all([load("minisearch.min.js"), load("search-index.js")]).then(() => {
      engine = new MiniSearch({
        fields: ["title", "heading", "text"],
        storeFields: ["title", "heading"],
        searchOptions: { prefix: true, fuzzy: 0.2, boost: { heading: 3, title: 2 } },
      });
      engine.addAll(window.TWINFORMER_SEARCH);
    }));
  const item = (child) => {
    const li = document.createElement("li");
    li.append(child);
    return li;
  };
  const show = () => {
    list.replaceChildren();
    const query = box.value.trim();
    if (!engine || !query) return;
    for (const hit of engine.search(query).slice(0, 12)) {
      const a = document.createElement("a");
      const page = document.createElement("small");
      a.href = hit.id; // "page.html#anchor"
      a.textContent = hit.heading;
      page.textContent = hit.title;
      a.append(page);
      list.append(item(a));
    }
    if (!list.children.length) {
      const none = document.createElement("span");
      none.textContent = `nothing found for "${query}"`;
      list.append(item(none));
    }
  };
  box.addEventListener("focus", ready, { once: true });
  box.addEventListener("input", () => ready().then(show));
  box.addEventListener("keydown", (e) => {
    const first = list.querySelector("a");
    if (e.key === "Enter" && first) location.href = first.href;
    if (e.key === "Escape") {
      box.value = "";
      show();
    }
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "/" && document.activeElement !== box) {
      e.preventDefault();
      box.focus();
    }
  });
})();
