// Line charts drawn as plain SVG.

import { h, s, fmtNumber, empty } from './dom.js';

export const PALETTE = ['#2563eb', '#dc2626', '#16a34a', '#d97706', '#7c3aed', '#0891b2', '#db2777', '#65a30d',
  '#9333ea', '#ea580c', '#0d9488', '#4f46e5'];

const W = 640;
const H = 220;
const M = { left: 56, right: 12, top: 10, bottom: 28 };

// Round tick values (1, 2 or 5 times a power of ten) between min and max, about count of them.
function ticks(min, max, count) {
  if (min === max) return [min];
  const raw = (max - min) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((st) => st >= raw);
  const out = [];
  for (let v = Math.ceil(min / step) * step; v <= max + step * 1e-9; v += step) out.push(Math.round(v / step) * step);
  return out;
}

function timeLabel(ms) {
  const d = new Date(ms);
  return d.toLocaleTimeString(undefined, { hour12: false });
}

// lineChart({series: [{name, points: [[x, y], ...]}], x: 'time' | 'number', yFormat, yMin, yMax, id, emptyText})
// → a <figure> with the chart and a legend, or an "empty" note when no series has a point.
export function lineChart(opts) {
  const series = (opts.series || []).filter((se) => se.points && se.points.length > 0);
  if (series.length === 0) return empty(opts.emptyText || 'no data');
  const yFormat = opts.yFormat || fmtNumber;
  const xFormat = opts.x === 'time' ? timeLabel : fmtNumber;
  let xMin = Infinity, xMax = -Infinity, yMin = Infinity, yMax = -Infinity;
  for (const se of series) {
    for (const [x, y] of se.points) {
      if (!Number.isFinite(x) || !Number.isFinite(y)) continue;
      xMin = Math.min(xMin, x);
      xMax = Math.max(xMax, x);
      yMin = Math.min(yMin, y);
      yMax = Math.max(yMax, y);
    }
  }
  if (!Number.isFinite(xMin)) return empty(opts.emptyText || 'no data');
  if (opts.yMin !== undefined) yMin = Math.min(yMin, opts.yMin);
  if (opts.yMax !== undefined) yMax = Math.max(yMax, opts.yMax);
  if (yMin === yMax) {
    yMin -= 1;
    yMax += 1;
  }
  if (xMin === xMax) {
    xMin -= 1;
    xMax += 1;
  }
  const px = (x) => M.left + ((x - xMin) / (xMax - xMin)) * (W - M.left - M.right);
  const py = (y) => H - M.bottom - ((y - yMin) / (yMax - yMin)) * (H - M.top - M.bottom);

  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': opts.title || 'chart' });
  for (const t of ticks(yMin, yMax, 4)) {
    svg.append(s('line', { x1: M.left, x2: W - M.right, y1: py(t), y2: py(t), class: 'grid' }));
    svg.append(s('text', { x: M.left - 6, y: py(t) + 4, class: 'tick', 'text-anchor': 'end' }, yFormat(t)));
  }
  for (const t of ticks(xMin, xMax, 4)) {
    svg.append(s('text', { x: px(t), y: H - 8, class: 'tick', 'text-anchor': 'middle' }, xFormat(t)));
  }
  svg.append(s('line', { x1: M.left, x2: M.left, y1: M.top, y2: H - M.bottom, class: 'axis' }));
  svg.append(s('line', { x1: M.left, x2: W - M.right, y1: H - M.bottom, y2: H - M.bottom, class: 'axis' }));

  const legend = h('ul', { class: 'legend' });
  series.forEach((se, i) => {
    const color = se.color || PALETTE[i % PALETTE.length];
    const pts = se.points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y)).sort((a, b) => a[0] - b[0]);
    const d = pts.map(([x, y], j) => `${j === 0 ? 'M' : 'L'}${px(x).toFixed(1)},${py(y).toFixed(1)}`).join(' ');
    const g = s('g', { class: 'series', dataset: { series: se.name } },
      s('title', {}, se.name),
      s('path', { d, stroke: color, fill: 'none', 'stroke-width': 1.6 }));
    if (pts.length <= 80) {
      for (const [x, y] of pts) {
        g.append(s('circle', { cx: px(x), cy: py(y), r: 2.2, fill: color },
          s('title', {}, `${se.name}: ${xFormat(x)} → ${yFormat(y)}`)));
      }
    }
    svg.append(g);
    legend.append(h('li', {}, h('span', { class: 'swatch', style: `background:${color}` }), se.name));
  });
  return h('figure', { class: 'chart-box', id: opts.id, dataset: { chart: opts.title || '' } },
    opts.title ? h('figcaption', {}, opts.title) : null, svg, series.length > 1 || opts.legend ? legend : null);
}
