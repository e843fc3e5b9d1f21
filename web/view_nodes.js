// Nodes: a filtered, paginated table (only one page of rows is in the DOM, so it stays fast at thousands of
// nodes), and one node's details: resources, labels, metric sources, metric charts and log files.

import { h, badge, table, empty, section, renderIfChanged, setChildren, fmtBytes, fmtTime, fmtDuration, fmtNumber } from './dom.js';
import { getJson, getOptional, getFeature, metricSeries, q, enc, ApiError } from './api.js';
import { lineChart } from './charts.js';
import { LogViewer, utf8Length } from './logs.js';

const PAGE_SIZE = 50;
const LIST_REFRESH_MS = 4000;
const CHART_WINDOW_MS = 15 * 60 * 1000;

function amount(resources, name, bytes) {
  const v = resources ? resources[name] : undefined;
  if (v === undefined) return null;
  return bytes ? fmtBytes(v) : fmtNumber(v);
}

function used(node, name, bytes) {
  const total = amount(node.resources_total, name, bytes);
  if (total === null) return '–';
  const t = node.resources_total[name];
  const a = (node.resources_available || {})[name] || 0;
  return `${bytes ? fmtBytes(t - a) : fmtNumber(t - a)} / ${total}`;
}

function searchText(n) {
  const labels = Object.entries(n.labels || {}).map(([k, v]) => `${k}=${v}`);
  return [n.node_id, n.state, n.address, n.hostname, ...labels].join(' ').toLowerCase();
}

// 'tpu v6e-0 team=data' → every term must appear (a `key=value` term matches a label with a key ending in key).
export function matches(node, terms) {
  const text = searchText(node);
  return terms.every((t) => {
    const eq = t.indexOf('=');
    if (eq > 0) {
      const key = t.slice(0, eq);
      const value = t.slice(eq + 1);
      return Object.entries(node.labels || {}).some(([k, v]) => (k.toLowerCase() === key || k.toLowerCase().endsWith(`/${key}`)) &&
        String(v).toLowerCase().includes(value));
    }
    return text.includes(t);
  });
}

export function nodesView(root, route) {
  let filter = route.query.get('filter') || '';
  let state = route.query.get('state') || '';
  let page = Math.max(0, (Number.parseInt(route.query.get('page') || '1', 10) || 1) - 1);
  let nodes = null;
  let fetchedAt = 0;

  const filterInput = h('input', { id: 'nodes-filter', type: 'search', value: filter,
    placeholder: 'filter: id, address, label (key=value); all terms must match',
    oninput: (e) => { filter = e.target.value; page = 0; render(); } });
  const stateSelect = h('select', { id: 'nodes-state', onchange: (e) => { state = e.target.value; page = 0; render(); } },
    ['', 'ALIVE', 'DEAD'].map((st) => h('option', { value: st, selected: st === state }, st || 'any state')));
  const pager = h('div', { class: 'pager', id: 'nodes-pager' });
  const body = h('div', { id: 'nodes-table-box' });
  root.append(h('h1', {}, 'Nodes'), h('div', { class: 'toolbar' }, filterInput, stateSelect), pager, body);

  function go(p) {
    page = p;
    render();
  }

  function render() {
    if (!nodes) return;
    window.history.replaceState(null, '', `#/nodes${q({ filter: filter || null, state: state || null, page: page ? page + 1 : null })}`);
    const terms = filter.toLowerCase().split(/\s+/).filter(Boolean);
    const shown = nodes.filter((n) => (!state || n.state === state) && matches(n, terms));
    const pages = Math.max(1, Math.ceil(shown.length / PAGE_SIZE));
    page = Math.min(page, pages - 1);
    const rows = shown.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE);
    renderIfChanged(pager, [page, pages, shown.length, nodes.length], () => [
      h('button', { type: 'button', id: 'nodes-prev', disabled: page === 0, onclick: () => go(page - 1) }, '‹ prev'),
      h('span', { id: 'nodes-page' }, ` page ${page + 1} of ${pages} · ${shown.length} of ${nodes.length} nodes `),
      h('button', { type: 'button', id: 'nodes-next', disabled: page >= pages - 1, onclick: () => go(page + 1) }, 'next ›'),
    ]);
    const model = rows.map((n) => [n.node_id, n.state, n.address, n.labels || {}, used(n, 'CPU'), used(n, 'memory', true),
      used(n, 'TPU'), used(n, 'GPU'), Math.round((n.last_heartbeat_age_ms || 0) / 1000)]);
    renderIfChanged(body, model, () => (model.length === 0 ? empty(nodes.length ? 'No node matches the filter.' : 'No nodes yet.') :
      table(['node', 'state', 'address', 'accelerator', 'slice / worker', 'group', 'CPU', 'memory', 'TPU', 'GPU', 'heartbeat'],
        model.map(([id, st, address, labels, cpu, mem, tpu, gpu, age]) => h('tr', { dataset: { node: id, state: st } },
          h('td', {}, h('a', { href: `#/nodes/${enc(id)}` }, id)),
          h('td', {}, badge(st)),
          h('td', {}, address),
          h('td', {}, labels['torus.io/accelerator-type'] || '–'),
          h('td', {}, labels['torus.io/tpu-slice-name'] ? `${labels['torus.io/tpu-slice-name']} / ${labels['torus.io/tpu-worker-id'] ?? '?'}` : '–'),
          h('td', {}, labels['torus.io/node-group'] || '–'),
          h('td', {}, cpu), h('td', {}, mem), h('td', {}, tpu), h('td', {}, gpu),
          h('td', {}, st === 'ALIVE' ? `${age}s ago` : '–'))), { id: 'nodes-table' })));
  }

  async function refresh() {
    if (nodes && Date.now() - fetchedAt < LIST_REFRESH_MS) return;
    const list = await getJson('/api/v0/nodes');
    nodes = (list || []).slice().sort((a, b) => a.node_id.localeCompare(b.node_id, undefined, { numeric: true }));
    fetchedAt = Date.now();
    render();
  }
  return { refresh };
}

function seriesName(labels, fallback) {
  if (labels.chip !== undefined) return `chip ${labels.chip}`;
  if (labels.gpu !== undefined) return `gpu ${labels.gpu}`;
  if (labels.process !== undefined) return `process ${labels.process}`;
  return fallback;
}

function toSeries(list, fallback, scale = 1) {
  return list.map((se) => ({ name: seriesName(se.labels || {}, fallback), points: se.points.map(([t, v]) => [t, v * scale]) }))
    .sort((a, b) => a.name.localeCompare(b.name, undefined, { numeric: true }));
}

const CHARTS = [
  { id: 'cpu', title: 'CPU %', metrics: [['torus_node_cpu_percent', 'cpu']], yMax: 100, yMin: 0 },
  { id: 'memory', title: 'memory', metrics: [['torus_node_memory_used_bytes', 'used'], ['torus_node_memory_total_bytes', 'total']], bytes: true, yMin: 0 },
  { id: 'duty', title: 'TPU duty cycle %', metrics: [['torus_tpu_duty_cycle_percent', 'duty cycle']], yMax: 100, yMin: 0, tpu: true },
  { id: 'hbm', title: 'TPU HBM used', metrics: [['torus_tpu_hbm_used_bytes', 'HBM used']], bytes: true, yMin: 0, tpu: true },
  { id: 'tensorcore', title: 'TensorCore utilization %', metrics: [['torus_tpu_tensorcore_utilization_percent', 'tensorcore']], yMax: 100, yMin: 0, tpu: true },
  { id: 'gpu', title: 'GPU utilization %', metrics: [['torus_gpu_utilization_percent', 'gpu']], yMax: 100, yMin: 0, gpu: true },
  { id: 'gpu-memory', title: 'GPU memory used', metrics: [['torus_gpu_memory_used_bytes', 'memory']], bytes: true, yMin: 0, gpu: true },
];

export function nodeView(root, route) {
  const id = route.parts[1];
  let file = route.query.get('file') || '';
  root.dataset.node = id;
  const header = h('div', { id: 'node-header' });
  const resources = h('div', { id: 'node-resources' });
  const labels = h('div', { id: 'node-labels' });
  const sources = h('div', { id: 'node-metric-sources' });
  const charts = h('div', { class: 'charts', id: 'node-charts' });
  const files = h('div', { id: 'node-log-files' });
  const logBox = h('div', { id: 'node-log-box' });
  root.append(h('p', {}, h('a', { href: '#/nodes' }, '← nodes')), header,
    h('div', { class: 'grid2' }, section('Resources', resources), section('Metric sources', sources)),
    section('Labels', labels), section('Metrics (last 15 minutes)', charts),
    section('Log files', files, logBox));
  const chartBoxes = new Map();
  let viewer = null;
  let chartsAt = 0;

  function openFile(name) {
    file = name;
    window.history.replaceState(null, '', `#/nodes/${enc(id)}${q({ file })}`);
    for (const tr of files.querySelectorAll('tr[data-file]')) tr.classList.toggle('selected', tr.dataset.file === name);
    viewer = new LogViewer(async (offset) => {
      const chunk = await getJson(`/api/v0/nodes/${enc(id)}/log${q({ file: name, offset, max_bytes: 262144 })}`);
      // offset is where data starts in the file (a negative request offset counts from the end).
      const start = Number(chunk.offset) || 0;
      const data = chunk.data || '';
      // next_offset counts bytes of the file; data may hold replacement characters for bytes that are not UTF-8.
      const next = Number.isFinite(Number(chunk.next_offset)) ? Number(chunk.next_offset) : start + utf8Length(data);
      return { data, next, finished: false };
    }, { start: -65536, attrs: { id: 'node-log', dataset: { node: id, file: name } }, emptyText: '(empty file)' });
    setChildren(logBox, h('h3', {}, name), viewer.element);
    viewer.poll(true);
  }

  async function refreshCharts(node) {
    const labelsOf = node.labels || {};
    const total = node.resources_total || {};
    const hasTpu = Boolean(total.TPU || labelsOf['torus.io/tpu-slice-name']);
    const hasGpu = Boolean(total.GPU);
    const since = Date.now() - CHART_WINDOW_MS;
    const wanted = CHARTS.filter((c) => (!c.tpu || hasTpu) && (!c.gpu || hasGpu));
    const results = await Promise.all(wanted.map((c) => Promise.all(c.metrics.map(([name]) => metricSeries(name, since, { node_id: id })))));
    const order = [];
    wanted.forEach((c, i) => {
      let box = chartBoxes.get(c.id);
      if (!box) {
        box = h('div', { class: 'chart-cell', dataset: { chart: c.id } });
        chartBoxes.set(c.id, box);
      }
      const series = c.metrics.flatMap(([, label], j) => toSeries(results[i][j], label));
      renderIfChanged(box, series, () => [h('h3', {}, c.title), lineChart({ series, x: 'time', title: '', id: `chart-${c.id}`,
        yFormat: c.bytes ? fmtBytes : fmtNumber, yMin: c.yMin, yMax: c.yMax, emptyText: 'no data' })]);
      order.push(box);
    });
    if (order.length !== charts.children.length || order.some((b, i) => charts.children[i] !== b)) charts.replaceChildren(...order);
  }

  async function refresh() {
    const node = await getOptional(`/api/v0/nodes/${enc(id)}`);
    if (!node) {
      setChildren(header, h('h1', {}, id), empty('No such node.'));
      return;
    }
    root.dataset.state = node.state;
    renderIfChanged(header, [node.node_id, node.state, node.address, node.hostname, node.pid, node.incarnation,
      node.start_time_ms, node.death_reason, Math.round((node.last_heartbeat_age_ms || 0) / 1000)], () => [
      h('h1', {}, node.node_id, ' ', badge(node.state)),
      h('dl', { class: 'facts' },
        h('dt', {}, 'address'), h('dd', {}, node.address || '–'),
        h('dt', {}, 'hostname'), h('dd', {}, node.hostname || '–'),
        h('dt', {}, 'agent pid'), h('dd', {}, String(node.pid ?? '–')),
        h('dt', {}, 'started'), h('dd', {}, fmtTime(node.start_time_ms)),
        h('dt', {}, 'heartbeat'), h('dd', {}, node.state === 'ALIVE' ? `${fmtDuration(node.last_heartbeat_age_ms)} ago` : '–'),
        node.death_reason ? [h('dt', {}, 'death reason'), h('dd', { class: 'reason' }, node.death_reason)] : null),
    ]);
    const names = [...new Set([...Object.keys(node.resources_total || {}), ...Object.keys(node.resources_available || {})])].sort();
    renderIfChanged(resources, [node.resources_total, node.resources_available], () => table(['resource', 'reserved', 'available', 'total'],
      names.map((n) => {
        const bytes = n === 'memory';
        const t = (node.resources_total || {})[n] || 0;
        const a = (node.resources_available || {})[n] || 0;
        const f = bytes ? fmtBytes : fmtNumber;
        return h('tr', { dataset: { resource: n } }, h('td', {}, n), h('td', {}, f(t - a)), h('td', {}, f(a)), h('td', {}, f(t)));
      })));
    renderIfChanged(labels, node.labels || {}, () => h('div', { class: 'labels' },
      Object.entries(node.labels || {}).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => h('span', { class: 'label-chip' }, `${k}=${v}`))));
    const srcs = Array.isArray(node.metrics_sources) ? node.metrics_sources : null;
    renderIfChanged(sources, srcs, () => (srcs === null ? empty('This head does not report metric sources.') : srcs.length === 0
      ? empty('No metric sources on this node.')
      : table(['source', 'available', 'error'], srcs.map((m) => h('tr', { dataset: { source: m.source, available: String(Boolean(m.available)) } },
        h('td', {}, m.source), h('td', {}, badge(m.available ? 'AVAILABLE' : 'UNAVAILABLE')), h('td', { class: 'reason' }, m.error || ''))))));

    if (Date.now() - chartsAt > 5000) {
      chartsAt = Date.now();
      await refreshCharts(node);
    }

    // The list comes from the node's agent through the head; when the agent cannot be reached the section says so
    // and the rest of the page keeps refreshing.
    let list = null;
    let listError = null;
    try {
      list = await getFeature('node-logs', `/api/v0/nodes/${enc(id)}/logs`);
    } catch (e) {
      if (!(e instanceof ApiError) || e.status === 0 || e.status === 401) throw e;
      listError = e.message;
    }
    const fileList = list && Array.isArray(list.files) ? list.files : null;
    renderIfChanged(files, [fileList, listError], () => (listError !== null ? empty(`Log files unavailable: ${listError}`)
      : fileList === null ? empty('No log files reported for this node.') : fileList.length === 0
      ? empty('No log files.')
      : table(['file', 'size', 'modified', ''], fileList.map((f) => h('tr', { dataset: { file: f.name }, class: f.name === file ? 'selected' : null },
        h('td', {}, h('code', {}, f.name)), h('td', {}, fmtBytes(f.size)), h('td', {}, fmtTime(f.modified_ms)),
        h('td', {}, h('button', { type: 'button', class: 'open-file', onclick: () => openFile(f.name) }, 'view')))), { id: 'node-files-table' })));
    if (!viewer && file && fileList && fileList.some((f) => f.name === file)) openFile(file);
    else if (viewer) await viewer.poll();
  }
  return { refresh };
}
