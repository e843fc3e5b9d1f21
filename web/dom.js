// DOM helpers. Every string reaches the page as a text node or an attribute value, never as markup, so names,
// labels and log lines from the cluster cannot inject HTML.

const SVG_NS = 'http://www.w3.org/2000/svg';

function build(el, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (key === 'dataset') {
      for (const [k, v] of Object.entries(value)) if (v !== undefined && v !== null) el.dataset[k] = String(v);
    } else if (key === 'value' && 'value' in el) {
      el.value = value;
    } else if (key === 'checked' || key === 'selected' || key === 'disabled') {
      el[key] = Boolean(value);
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// h('a', {href: '#/runs', class: 'x'}, 'text', otherNode): an HTML element.
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

// s('rect', {x: 1, ...}, ...): an SVG element.
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

// Replaces el's children.
export function setChildren(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// Rebuilds el's content only when key (any JSON-able value) differs from the last call: polling then leaves
// unchanged parts alone, so hover, focus and selection survive a refresh.
export function renderIfChanged(el, key, buildFn) {
  const text = JSON.stringify(key);
  if (el.dataset.renderKey === text) return false;
  el.dataset.renderKey = text;
  setChildren(el, buildFn());
  return true;
}

export function fmtBytes(n) {
  if (n === undefined || n === null || Number.isNaN(n)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = Number(n);
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(v >= 100 ? 0 : 1)} ${units[i]}`;
}

export function fmtTime(ms) {
  if (!ms) return '–';
  const d = new Date(ms);
  return d.toLocaleString(undefined, { hour12: false });
}

export function fmtDuration(ms) {
  if (ms === undefined || ms === null || ms < 0) return '–';
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

export function fmtNumber(v) {
  if (v === undefined || v === null || Number.isNaN(v)) return '–';
  const a = Math.abs(v);
  if (a !== 0 && (a < 0.001 || a >= 1e6)) return Number(v).toExponential(2);
  return String(Math.round(v * 1000) / 1000);
}

// A status word as a coloured badge; CSS colours it by data-state.
export function badge(state) {
  return h('span', { class: 'badge', dataset: { state: state || 'UNKNOWN' } }, state || 'UNKNOWN');
}

export function table(headers, rows, attrs) {
  return h('table', attrs || {},
    h('thead', {}, h('tr', {}, headers.map((title) => h('th', {}, title)))),
    h('tbody', {}, rows));
}

export function empty(text) {
  return h('p', { class: 'empty' }, text);
}

export function section(title, ...children) {
  return h('section', { class: 'card' }, h('h2', {}, title), ...children);
}
