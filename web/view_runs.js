// Gang runs: the list, and one run with its metric curves, workers, attempts and per-rank logs.

import { h, badge, table, empty, section, renderIfChanged, setChildren, fmtTime, fmtDuration } from './dom.js';
import { getJson, getOptional, q, enc } from './api.js';
import { lineChart } from './charts.js';
import { LogViewer } from './logs.js';

const ACTIVE = new Set(['PENDING', 'RUNNING', 'RESTARTING']);

function runDuration(r, now) {
  if (!r.created_time_ms) return '–';
  return fmtDuration((r.end_time_ms || now) - r.created_time_ms);
}

export function runsView(root) {
  const body = h('div', { id: 'runs-list' });
  root.append(h('h1', {}, 'Runs'), body);

  async function refresh() {
    const runs = (await getOptional('/api/v0/runs')) || [];
    const now = Date.now();
    const rows = runs.slice().reverse().map((r) => [r.run_id, r.name, r.status, r.attempt, r.failures, r.max_failures,
      r.num_workers, r.created_time_ms, runDuration(r, now), r.message]);
    renderIfChanged(body, rows, () => (rows.length === 0 ? empty('No gang runs yet. Start one with `torus train`.') :
      table(['name', 'status', 'attempt', 'failures', 'workers', 'created', 'duration', 'message'],
        rows.map(([id, name, status, attempt, failures, maxFailures, workers, created, duration, message]) =>
          h('tr', { dataset: { run: name, runId: id, status } },
            h('td', {}, h('a', { href: `#/runs/${enc(id)}` }, name), h('div', { class: 'muted small' }, id)),
            h('td', {}, badge(status)),
            h('td', {}, String(attempt)),
            h('td', {}, `${failures} / ${maxFailures < 0 ? '∞' : maxFailures}`),
            h('td', {}, String(workers)),
            h('td', {}, fmtTime(created)),
            h('td', {}, duration),
            h('td', { class: 'reason' }, message || ''))), { id: 'runs-table' })));
  }
  return { refresh };
}

// Every numeric key reported in any attempt's metrics (loss first).
function metricKeys(run) {
  const keys = new Set();
  for (const a of run.attempts || []) {
    for (const m of a.metrics || []) {
      for (const [k, v] of Object.entries(m.metrics || {})) if (typeof v === 'number' && k !== 'step') keys.add(k);
    }
  }
  return [...keys].sort((a, b) => (a === 'loss' ? -1 : b === 'loss' ? 1 : a.localeCompare(b)));
}

function metricSeries(run, key) {
  return (run.attempts || []).map((a) => ({
    name: `attempt ${a.attempt}`,
    points: (a.metrics || [])
      .filter((m) => m.metrics && typeof m.metrics[key] === 'number')
      .map((m) => [typeof m.step === 'number' ? m.step : m.metrics.step, m.metrics[key]]),
  }));
}

export function runView(root, route) {
  const runKey = route.parts[1];
  let rank = Number.parseInt(route.query.get('rank') || '0', 10) || 0;
  let attemptChoice = Number.parseInt(route.query.get('attempt') || '0', 10) || 0; // 0 = latest
  let metricKey = route.query.get('metric') || '';
  let run = null;

  const header = h('div', { id: 'run-header' });
  const chartBox = h('div', { id: 'run-chart' });
  const metricSelect = h('select', { id: 'run-metric', onchange: (e) => { metricKey = e.target.value; drawChart(); } });
  const workers = h('div', { id: 'run-workers' });
  const attempts = h('div', { id: 'run-attempts' });
  const goodput = h('div', { id: 'run-goodput' });
  const rankSelect = h('select', { id: 'log-rank', onchange: (e) => { rank = Number(e.target.value); openLog(); } });
  const attemptSelect = h('select', { id: 'log-attempt', onchange: (e) => { attemptChoice = Number(e.target.value); openLog(); } });
  const logBox = h('div', { id: 'run-log-box' });
  root.append(h('p', {}, h('a', { href: '#/runs' }, '← runs')), header,
    section('Metrics', h('div', { class: 'toolbar' }, metricSelect), chartBox),
    section('Workers', workers),
    section('Logs', h('div', { class: 'toolbar' }, h('label', {}, 'rank ', rankSelect), ' ', h('label', {}, 'attempt ', attemptSelect)), logBox),
    section('Attempts', attempts),
    section('Goodput', goodput));

  let viewer = null;
  function syncHash() {
    const query = q({ rank: rank || null, attempt: attemptChoice || null, metric: metricKey || null });
    window.history.replaceState(null, '', `#/runs/${enc(runKey)}${query}`);
  }

  function openLog() {
    syncHash();
    if (!run) return;
    const attempt = attemptChoice || run.attempt;
    if (!attempt) {
      viewer = null;
      setChildren(logBox, empty('No attempt has started yet.'));
      return;
    }
    const id = run.run_id;
    const r = rank;
    viewer = new LogViewer(async (offset) => {
      const chunk = await getJson(`/api/v0/runs/${enc(id)}/logs${q({ rank: r, attempt, offset, max_bytes: 262144 })}`);
      return { data: chunk.data, next: chunk.next_offset, finished: chunk.finished };
    }, { attrs: { id: 'run-log', dataset: { run: run.name, runId: id, rank: r, attempt } }, follow: ACTIVE.has(run.status),
      emptyText: '(no output yet)' });
    setChildren(logBox, viewer.element);
    viewer.poll(true);
  }

  function drawChart() {
    if (!run) return;
    syncHash();
    const keys = metricKeys(run);
    const key = keys.includes(metricKey) ? metricKey : keys[0];
    renderIfChanged(metricSelect, keys.concat([key]), () => keys.map((k) => h('option', { value: k, selected: k === key }, k)));
    metricSelect.hidden = keys.length === 0;
    const series = key ? metricSeries(run, key) : [];
    renderIfChanged(chartBox, [key, series], () => lineChart({ series, title: key ? `${key} by step` : '', id: 'run-metric-chart',
      legend: true, emptyText: 'No metrics reported yet (workers report them with torus_train.report).' }));
  }

  async function refresh() {
    const fresh = await getOptional(`/api/v0/runs/${enc(runKey)}`);
    if (!fresh) {
      setChildren(header, h('h1', {}, runKey), empty('No such run.'));
      return;
    }
    const first = run === null;
    const prevAttempt = run ? run.attempt : 0;
    run = fresh;
    root.dataset.run = run.name;
    root.dataset.runId = run.run_id;
    root.dataset.status = run.status;
    const latest = (run.attempts || [])[run.attempts.length - 1];
    renderIfChanged(header, [run.name, run.run_id, run.status, run.message, run.attempt, run.failures, run.max_failures,
      run.storage_path, run.entrypoint, run.group_id], () => [
      h('h1', {}, run.name, ' ', badge(run.status)),
      h('dl', { class: 'facts' },
        h('dt', {}, 'run id'), h('dd', {}, run.run_id),
        h('dt', {}, 'message'), h('dd', {}, run.message || '–'),
        h('dt', {}, 'attempt'), h('dd', {}, String(run.attempt)),
        h('dt', {}, 'failures'), h('dd', {}, `${run.failures} of ${run.max_failures < 0 ? 'unlimited' : run.max_failures} allowed`),
        h('dt', {}, 'group'), h('dd', {}, run.group_id || '–'),
        h('dt', {}, 'storage'), h('dd', {}, run.storage_path || '–'),
        h('dt', {}, 'entrypoint'), h('dd', {}, h('code', {}, Array.isArray(run.entrypoint) ? run.entrypoint.join(' ') : String(run.entrypoint || '')))),
    ]);
    drawChart();

    const ranks = latest ? latest.ranks || [] : [];
    renderIfChanged(workers, ranks, () => (ranks.length === 0 ? empty('No workers yet.') :
      table(['rank', 'node', 'address', 'slice', 'chips', 'state', ''],
        ranks.map((r) => h('tr', { dataset: { rank: r.rank, node: r.node_id } },
          h('td', {}, String(r.rank)),
          h('td', {}, h('a', { href: `#/nodes/${enc(r.node_id)}` }, r.node_id)),
          h('td', {}, r.address || ''),
          h('td', {}, r.slice || '–'),
          h('td', {}, Array.isArray(r.chips) && r.chips.length ? r.chips.join(',') : '–'),
          h('td', {}, r.exited ? (r.signal ? `killed by signal ${r.signal}` : `exited ${r.exit_code}`) : 'running'),
          h('td', {}, h('button', { type: 'button', class: 'open-log', dataset: { rank: r.rank },
            onclick: () => { rank = r.rank; rankSelect.value = String(r.rank); openLog(); } }, 'log')))), { id: 'workers-table' })));

    const attemptRows = (run.attempts || []).map((a) => [a.attempt, a.start_time_ms, a.end_time_ms, a.end_reason,
      a.cause || '', a.end_details || '', a.checkpoint_dir]);
    renderIfChanged(attempts, attemptRows, () => (attemptRows.length === 0 ? empty('No attempt has started yet.') :
      table(['attempt', 'started', 'ended', 'cause', 'why it ended', 'resumed from'],
        attemptRows.map(([n, start, end, reason, cause, details, ckpt]) => h('tr', { dataset: { attempt: n, cause } },
          h('td', {}, String(n)), h('td', {}, fmtTime(start)), h('td', {}, end ? fmtTime(end) : '–'),
          h('td', {}, cause ? badge(cause) : ''),
          h('td', { class: 'reason' }, reason || '', details ? h('pre', { class: 'details' }, details) : ''),
          h('td', {}, ckpt || '–'))))));

    // One stacked bar per attempt, on one time scale: waiting before it, start-up, productive, lost.
    const g = run.goodput;
    const parts = ['waiting', 'startup', 'productive', 'lost'];
    const gpKey = g ? [g.wall_s, g.productive_s, g.lost_s, g.restart_s, g.queued_s, g.startup_s] : [];
    renderIfChanged(goodput, gpKey, () => {
      if (!g || !(g.wall_s > 0)) return empty('No time has passed yet.');
      const pct = (v) => `${(100 * v / g.wall_s).toFixed(2)}%`;
      const secs = (v) => `${v.toFixed(1)} s`;
      return [
        h('p', { id: 'goodput-summary' }, `goodput ${(100 * g.goodput).toFixed(1)}%: productive ${secs(g.productive_s)} of ${secs(g.wall_s)} `
          + `(queued ${secs(g.queued_s)}, start-up ${secs(g.startup_s)}, lost ${secs(g.lost_s)}, restart ${secs(g.restart_s)})`),
        ...(g.attempts || []).map((a) => h('div', { class: 'goodput-row', dataset: { attempt: a.attempt } },
          h('span', { class: 'goodput-label' }, `attempt ${a.attempt}`),
          h('div', { class: 'goodput-bar' }, ...parts.map((p) => h('span', {
            class: `gp-${p}`, style: `width: ${pct(a[`${p}_s`])}`, title: `${p} ${secs(a[`${p}_s`])}` }))))),
        h('p', { class: 'goodput-legend' }, ...parts.map((p) => h('span', { class: `gp-${p}` }, p))),
      ];
    });

    const rankCount = Math.max(ranks.length, run.num_workers || 0, rank + 1);
    renderIfChanged(rankSelect, [rankCount, rank], () => Array.from({ length: rankCount }, (_, i) =>
      h('option', { value: i, selected: i === rank }, String(i))));
    renderIfChanged(attemptSelect, [run.attempt, attemptChoice], () => [h('option', { value: 0, selected: attemptChoice === 0 }, 'latest'),
      ...(run.attempts || []).map((a) => h('option', { value: a.attempt, selected: a.attempt === attemptChoice }, String(a.attempt)))]);

    if (first || (attemptChoice === 0 && run.attempt !== prevAttempt)) {
      openLog();
    } else if (viewer) {
      await viewer.poll();
    }
  }

  return { refresh };
}
