// Slices: each TPU slice drawn as its topology grid of hosts (by worker id) and chips, coloured by state or by
// duty cycle, and labelled with the run (or job, or group) that holds it.

import { h, s, badge, empty, renderIfChanged, setChildren } from './dom.js';
import { getJson, getOptional, latestMetric } from './api.js';
import { layout } from './topology.js';
import { ownership } from './ownership.js';

const CHIP = 26;
const CHIP_GAP = 4;
const HOST_PAD = 6;
const HOST_GAP = 10;
const LAYER_GAP = 26;
const LABEL = 14;

// Duty cycle 0..100 → a colour from pale to deep blue.
export function dutyColor(pct) {
  const p = Math.max(0, Math.min(100, pct)) / 100;
  const light = 92 - p * 55;
  return `hsl(215, ${45 + p * 40}%, ${light}%)`;
}

function chipState(hostState, held) {
  if (hostState !== 'ALIVE') return 'dead';
  if (held && held.rank !== null && held.rank !== undefined) return 'busy';
  if (held) return 'reserved';
  return 'free';
}

function holderText(held) {
  if (!held) return 'free';
  const who = `${held.holder.kind} ${held.holder.name}`;
  return held.rank !== null && held.rank !== undefined ? `${who}, rank ${held.rank}` : `reserved by ${who}`;
}

// The model of one slice card: plain data, so that an unchanged slice is not redrawn.
function sliceModel(slice, own, duty, hbm, colorBy) {
  const lay = layout(slice);
  const byWorker = new Map((slice.hosts || []).map((x) => [Number(x.worker_id), x]));
  const hosts = [];
  for (let w = 0; w < lay.hosts; w++) {
    const host = byWorker.get(w);
    const chips = [];
    for (let c = 0; c < lay.chipsPerHost; c++) {
      const held = host ? own.chip(host.node_id, c) : null;
      const d = host ? duty.get(`${host.node_id}/${c}`) : undefined;
      const used = host ? hbm.get(`${host.node_id}/${c}`) : undefined;
      chips.push({
        index: c,
        state: host ? chipState(host.state, held) : 'missing',
        holder: held ? holderText(held) : 'free',
        run: held && held.holder.kind === 'run' ? held.holder.name : null,
        rank: held && held.rank !== null ? held.rank : null,
        duty: d === undefined ? null : Math.round(d * 10) / 10,
        hbm: used === undefined ? null : Math.round(used / 2 ** 30 * 10) / 10,  // GiB
      });
    }
    hosts.push({ worker: w, node: host ? host.node_id : null, state: host ? host.state : 'MISSING',
      address: host ? host.address : '', chips });
  }
  const holder = own.holderOfGroup(slice.reserved_by);
  return { name: slice.name, state: slice.state, type: slice.accelerator_type, topology: slice.topology,
    podType: slice.pod_type, alive: slice.hosts_alive, expected: slice.expected_hosts, reason: slice.reason,
    reservedBy: slice.reserved_by, holder, hosts, colorBy, bounds: [lay.hostBounds, lay.chipBounds] };
}

// How a chip is drawn: its fill (duty colouring), its data-state and its hover text.
function chipFill(m, chip) {
  return m.colorBy === 'duty' && chip.duty !== null && chip.state !== 'dead' ? dutyColor(chip.duty) : null;
}

function chipDataState(m, chip) {
  return m.colorBy === 'duty' && chip.duty === null ? 'nodata' : chip.state;
}

function chipTitle(host, chip) {
  return `chip ${chip.index} of ${host.node || `worker ${host.worker}`}: ${chip.holder}` +
    (chip.duty !== null ? `; duty cycle ${chip.duty}%` : '; no duty-cycle data') +
    (chip.hbm !== null ? `; HBM used ${chip.hbm} GiB` : '');
}

// The card's model without the duty cycles: when only those change, the chips are repainted in place.
function structureKey(m) {
  return { ...m, hosts: m.hosts.map((x) => ({ ...x, chips: x.chips.map((c) => ({ ...c, duty: undefined, hbm: undefined })) })) };
}

function dutyKey(m) {
  return m.hosts.map((x) => x.chips.map((c) => `${c.duty}/${c.hbm}`).join(',')).join(';');
}

// Updates the chips of a drawn card to new duty cycles: fill, data-duty, data-state and hover text of the chips
// whose value changed. The rects are in the order drawSlice appends them (hosts, then chips).
function repaintDuty(card, m) {
  const rects = card.querySelectorAll('rect.chip');
  let i = 0;
  for (const host of m.hosts) {
    for (const chip of host.chips) {
      const rect = rects[i++];
      if (!rect) return;
      const duty = chip.duty === null ? undefined : String(chip.duty);
      const title = chipTitle(host, chip);
      if (rect.dataset.duty === duty && (!rect.firstChild || rect.firstChild.textContent === title)) continue;
      if (duty === undefined) delete rect.dataset.duty; else rect.dataset.duty = duty;
      rect.dataset.state = chipDataState(m, chip);
      const fill = chipFill(m, chip);
      if (fill) rect.style.fill = fill; else rect.style.removeProperty('fill');
      if (rect.firstChild) rect.firstChild.textContent = title;
    }
  }
}

function drawSlice(m) {
  const [hostBounds, chipBounds] = m.bounds;
  const hostW = chipBounds[0] * CHIP + (chipBounds[0] - 1) * CHIP_GAP + 2 * HOST_PAD;
  const hostH = chipBounds[1] * CHIP + (chipBounds[1] - 1) * CHIP_GAP + 2 * HOST_PAD + LABEL;
  const layerW = hostBounds[0] * hostW + (hostBounds[0] - 1) * HOST_GAP;
  const layerH = hostBounds[1] * hostH + (hostBounds[1] - 1) * HOST_GAP;
  const width = hostBounds[2] * layerW + (hostBounds[2] - 1) * LAYER_GAP + 2;
  const height = layerH + 2;
  const svg = s('svg', { class: 'topology', width, height, viewBox: `-1 -1 ${width} ${height}`,
    role: 'img', 'aria-label': `topology of ${m.name}` });
  const hx = hostBounds[0];
  const hy = hostBounds[1];
  for (const host of m.hosts) {
    const pos = [host.worker % hx, Math.floor(host.worker / hx) % hy, Math.floor(host.worker / (hx * hy))];
    const x0 = pos[2] * (layerW + LAYER_GAP) + pos[0] * (hostW + HOST_GAP);
    const y0 = pos[1] * (hostH + HOST_GAP);
    const ranks = [...new Set(host.chips.filter((c) => c.rank !== null).map((c) => c.rank))].sort((a, b) => a - b);
    const runs = [...new Set(host.chips.filter((c) => c.run).map((c) => c.run))];
    const title = host.node
      ? `${host.node} (worker ${host.worker}, ${host.address}) ${host.state}` +
        (runs.length ? ` — run ${runs.join(', ')}, rank ${ranks.join(', ')}` : '')
      : `worker ${host.worker}: no host registered`;
    const g = s('g', {
      class: 'host',
      transform: `translate(${x0},${y0})`,
      dataset: { host: host.node, worker: host.worker, state: host.state, run: runs.length === 1 ? runs[0] : null,
        rank: ranks.length === 1 ? ranks[0] : null, ranks: ranks.length ? ranks.join(',') : null },
    },
    s('title', {}, title),
    s('rect', { class: 'host-box', width: hostW, height: hostH, rx: 4 }),
    s('text', { class: 'host-label', x: HOST_PAD, y: LABEL - 3 }, `w${host.worker}${ranks.length === 1 ? ` · r${ranks[0]}` : ''}`));
    if (host.node) {
      // The whole host links to its node page.
      g.addEventListener('click', () => { window.location.hash = `#/nodes/${encodeURIComponent(host.node)}`; });
    }
    for (const chip of host.chips) {
      const [cx, cy] = [chip.index % chipBounds[0], Math.floor(chip.index / chipBounds[0]) % chipBounds[1]];
      const fill = chipFill(m, chip);
      g.append(s('rect', {
        class: 'chip',
        x: HOST_PAD + cx * (CHIP + CHIP_GAP),
        y: LABEL + HOST_PAD + cy * (CHIP + CHIP_GAP),
        width: CHIP, height: CHIP, rx: 3,
        style: fill ? `fill:${fill}` : null,
        dataset: { chip: chip.index, state: chipDataState(m, chip), run: chip.run, rank: chip.rank, duty: chip.duty },
      }, s('title', {}, chipTitle(host, chip))));
    }
    svg.append(g);
  }
  return svg;
}

function sliceCard(m) {
  const holder = m.holder
    ? h('span', { class: 'holder', dataset: { holder: m.holder.kind } }, `${m.holder.kind} `,
      m.holder.href ? h('a', { href: m.holder.href, class: 'run-link', dataset: { run: m.holder.kind === 'run' ? m.holder.name : null } }, m.holder.name) : m.holder.name)
    : null;
  return [
    h('header', {},
      h('strong', { class: 'slice-name' }, m.name), ' ', badge(m.state), ' ',
      h('span', { class: 'muted' }, `${m.type} ${m.topology} (${m.podType}) · ${m.alive}/${m.expected} hosts`),
      holder ? [' · ', holder] : null),
    m.reason ? h('p', { class: 'reason' }, m.reason) : null,
    drawSlice(m),
  ];
}

function legend(colorBy) {
  if (colorBy === 'duty') {
    return h('div', { class: 'legend-row' }, 'duty cycle: ',
      [0, 25, 50, 75, 100].map((p) => h('span', { class: 'key' }, h('span', { class: 'swatch', style: `background:${dutyColor(p)}` }), `${p}%`)),
      h('span', { class: 'key' }, h('span', { class: 'swatch chip-nodata' }), 'no data'));
  }
  return h('div', { class: 'legend-row' },
    [['free', 'free'], ['reserved', 'reserved'], ['busy', 'running a rank'], ['dead', 'host dead'], ['missing', 'host missing']]
      .map(([state, text]) => h('span', { class: 'key' }, h('span', { class: `swatch chip-${state}` }), text)));
}

// The newest value of each chip ("node/chip") among latest-point series: a chip has a series per holder (its idle
// one, without run labels, then one per run and rank that held it), listed in no particular order, and an older
// holder's last point must not hide the current one.
function newestByChip(series) {
  const newest = new Map();
  for (const d of series) {
    const key = `${d.labels.node_id}/${d.labels.chip}`;
    const seen = newest.get(key);
    if (seen === undefined || d.t > seen.t) newest.set(key, d);
  }
  return new Map([...newest].map(([key, d]) => [key, d.value]));
}

export function slicesView(root, route) {
  let colorBy = route.query.get('color') === 'duty' ? 'duty' : 'state';
  let filter = route.query.get('filter') || '';
  let lastRefresh = null;
  const legendBox = h('div', { id: 'slices-legend' });
  const summary = h('p', { class: 'muted', id: 'slices-summary' });
  const list = h('div', { class: 'slices', id: 'slices' });
  const cards = new Map();
  const dutyKeys = new WeakMap(); // card → the duty cycles it shows

  const colorSelect = h('select', { id: 'slices-color', onchange: (e) => { colorBy = e.target.value; if (lastRefresh) lastRefresh(); } },
    h('option', { value: 'state', selected: colorBy === 'state' }, 'colour by state'),
    h('option', { value: 'duty', selected: colorBy === 'duty' }, 'colour by duty cycle'));
  const filterInput = h('input', { id: 'slices-filter', type: 'search', placeholder: 'filter: name, type, state, run', value: filter,
    oninput: (e) => { filter = e.target.value.trim().toLowerCase(); if (lastRefresh) lastRefresh(); } });
  root.append(h('h1', {}, 'Slices'), h('div', { class: 'toolbar' }, filterInput, colorSelect), legendBox, summary, list);

  let data = null;
  function render() {
    if (!data) return;
    const { slices, own, duty, hbm } = data;
    renderIfChanged(legendBox, colorBy, () => legend(colorBy));
    const models = slices.map((x) => sliceModel(x, own, duty, hbm, colorBy)).filter((m) => {
      if (!filter) return true;
      const text = [m.name, m.state, m.type, m.topology, m.podType, m.holder ? m.holder.name : '',
        ...m.hosts.map((x) => x.node || '')].join(' ').toLowerCase();
      return text.includes(filter);
    });
    setChildren(summary, `${models.length} of ${slices.length} slices`);
    const order = [];
    for (const m of models) {
      let card = cards.get(m.name);
      if (!card) {
        card = h('div', { class: 'card slice-card' });
        cards.set(m.name, card);
      }
      card.dataset.slice = m.name;
      card.dataset.state = m.state;
      if (m.holder && m.holder.kind === 'run') card.dataset.run = m.holder.name; else delete card.dataset.run;
      // A card is redrawn when the slice, its holders or the colouring change; new duty cycles only repaint chips.
      const duties = dutyKey(m);
      if (renderIfChanged(card, structureKey(m), () => sliceCard(m))) dutyKeys.set(card, duties);
      else if (dutyKeys.get(card) !== duties) {
        repaintDuty(card, m);
        dutyKeys.set(card, duties);
      }
      order.push(card);
    }
    const same = order.length === list.children.length && order.every((c, i) => list.children[i] === c);
    if (!same) {
      if (order.length === 0) setChildren(list, empty(slices.length ? 'No slice matches the filter.' : 'No TPU slices in the cluster.'));
      else list.replaceChildren(...order);
    }
  }
  lastRefresh = render;

  async function refresh() {
    const [sliceList, groups, runs, dutySeries, hbmSeries] = await Promise.all([
      getJson('/api/v0/slices'),
      getOptional('/api/v0/placement_groups'),
      getOptional('/api/v0/runs'),
      colorBy === 'duty' ? latestMetric('torus_tpu_duty_cycle_percent', {}) : Promise.resolve([]),
      colorBy === 'duty' ? latestMetric('torus_tpu_hbm_used_bytes', {}) : Promise.resolve([]),
    ]);
    const duty = newestByChip(dutySeries);
    const hbm = newestByChip(hbmSeries);
    const slices = (Array.isArray(sliceList) ? sliceList : []).slice().sort((a, b) => a.name.localeCompare(b.name));
    data = { slices, own: ownership(groups || [], runs || []), duty, hbm };
    render();
  }

  return { refresh };
}
