// Markdown to DOM nodes, safely: every piece of a message becomes a text
// node or an element made here with createElement, never parsed HTML, so
// a body such as <img src=x onerror=alert(1)> is shown as those
// characters. Links keep only http(s) and mailto targets. Images are shown
// as links (no request leaves for a URL a sender chose).

const SAFE_URL = /^(https?:\/\/|mailto:)/i;

function el(tag, cls) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  return e;
}

function link(href, label) {
  if (!SAFE_URL.test(href)) return document.createTextNode(label === href ? href : `${label} (${href})`);
  const a = el('a');
  a.href = href;
  a.rel = 'noopener noreferrer nofollow';
  a.target = '_blank';
  a.textContent = label;
  return a;
}

// Inline spans: `code`, **strong**, *em* or _em_, [text](url), ![alt](url)
// and bare http(s) URLs.
const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([^*]+)\*\*|__([^_]+)__|\*([^*\s][^*]*)\*|\b_([^_\s][^_]*)_\b|(!?)\[([^\]]*)\]\(([^)\s]+)\)|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])/;

export function inline(parent, text) {
  let rest = text;
  while (rest.length > 0) {
    const m = INLINE.exec(rest);
    if (!m) { parent.append(rest); return; }
    if (m.index > 0) parent.append(rest.slice(0, m.index));
    if (m[1]) {
      const c = el('code');
      c.textContent = m[2].replace(/^ (.*) $/, '$1');
      parent.append(c);
    } else if (m[3] !== undefined || m[4] !== undefined) {
      const s = el('strong');
      inline(s, m[3] ?? m[4]);
      parent.append(s);
    } else if (m[5] !== undefined || m[6] !== undefined) {
      const s = el('em');
      inline(s, m[5] ?? m[6]);
      parent.append(s);
    } else if (m[9] !== undefined) {
      const label = m[8] || m[9];
      parent.append(link(m[9], m[7] ? `image: ${label}` : label));
    } else if (m[10]) {
      parent.append(link(m[10], m[10]));
    }
    rest = rest.slice(m.index + m[0].length);
  }
}

// render returns a DocumentFragment of text, a small Markdown subset:
// paragraphs, headings, fenced code, block quotes, lists and inline spans.
export function render(text) {
  const frag = document.createDocumentFragment();
  const lines = String(text ?? '').replace(/\r\n?/g, '\n').split('\n');
  let para = null;
  let list = null;
  const endBlocks = () => { para = null; list = null; };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    let m;
    if ((m = /^\s*(```|~~~)(.*)$/.exec(line))) {
      endBlocks();
      const fence = m[1];
      const body = [];
      for (i++; i < lines.length && !lines[i].trimStart().startsWith(fence); i++) body.push(lines[i]);
      const pre = el('pre');
      const code = el('code');
      code.textContent = body.join('\n');
      pre.append(code);
      frag.append(pre);
    } else if (/^\s*$/.test(line)) {
      endBlocks();
    } else if ((m = /^(#{1,6})\s+(.*)$/.exec(line))) {
      endBlocks();
      const h = el('p', 'h');
      h.setAttribute('role', 'heading');
      h.setAttribute('aria-level', String(m[1].length + 2 > 6 ? 6 : m[1].length + 2));
      inline(h, m[2]);
      frag.append(h);
    } else if (/^\s*>/.test(line)) {
      endBlocks();
      const quoted = [];
      for (; i < lines.length && /^\s*>/.test(lines[i]); i++) quoted.push(lines[i].replace(/^\s*> ?/, ''));
      i--;
      const q = el('blockquote');
      q.append(render(quoted.join('\n')));
      frag.append(q);
    } else if ((m = /^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/.exec(line))) {
      const tag = /\d/.test(m[1]) ? 'ol' : 'ul';
      if (!list || list.tagName.toLowerCase() !== tag) {
        para = null;
        list = el(tag);
        frag.append(list);
      }
      const li = el('li');
      inline(li, m[2]);
      list.append(li);
    } else {
      list = null;
      if (!para) {
        para = el('p');
        frag.append(para);
      } else {
        para.append(el('br'));
      }
      inline(para, line);
    }
  }
  return frag;
}
