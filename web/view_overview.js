// Overview: nodes, chips, slices, pending requests and their reasons, runs and jobs at a glance.

import { h, badge, table, empty, section, renderIfChanged, fmtDuration } from './dom.js';
import { getJson, getOptional } from './api.js';

function stat(id, value, label, href) {
  const body = [h('div', { class: 'value' }, value), h('div', { class: 'label' }, label)];
  return href
    ? h('a', { class: 'stat', href, dataset: { stat: id } }, body)
    : h('div', { class: 'stat', dataset: { stat: id } }, body);
}

function countBy(items, key) {
  const out = {};
  for (const item of items) out[item[key]] = (out[item[key]] || 0) + 1;
  return out;
}

function counts(id, byState, order) {
  const keys = [...order, ...Object.keys(byState).filter((k) => !order.includes(k)).sort()];
  return h('ul', { class: 'counts', dataset: { counts: id } },
    keys.map((k) => h('li', { dataset: { state: k } }, badge(k), ' ', String(byState[k] || 0))));
}

export function overviewView(root) {
  const stats = h('div', { class: 'stats', id: 'overview-stats' });
  const states = h('div', { class: 'grid3', id: 'overview-states' });
  const pending = h('div', { id: 'overview-pending' });
  root.append(h('h1', {}, 'Overview'), stats, states, section('Pending requests', pending));

  async function refresh() {
    const [cluster, runs, jobs] = await Promise.all([
      getJson('/api/v0/cluster'),
      getOptional('/api/v0/runs'),
      getOptional('/api/jobs/'),
    ]);
    const total = cluster.resources_total || {};
    const avail = cluster.resources_available || {};
    const chips = total.TPU || 0;
    const chipsInUse = chips - (avail.TPU || 0);
    const gpus = total.GPU || 0;
    const runList = Array.isArray(runs) ? runs : [];
    const jobList = Array.isArray(jobs) ? jobs : [];
    const activeRuns = runList.filter((r) => ['PENDING', 'RUNNING', 'RESTARTING'].includes(r.status)).length;
    const activeJobs = jobList.filter((j) => ['PENDING', 'RUNNING'].includes(j.status)).length;
    const slices = cluster.slices || [];

    renderIfChanged(stats, [cluster.nodes_alive, cluster.nodes_dead, chips, chipsInUse, gpus, avail.GPU,
      slices.length, runList.length, activeRuns, jobList.length, activeJobs], () => [
      stat('nodes-alive', cluster.nodes_alive, 'nodes alive', '#/nodes?state=ALIVE'),
      stat('nodes-dead', cluster.nodes_dead, 'nodes dead', '#/nodes?state=DEAD'),
      stat('chips-total', chips, 'TPU chips', '#/slices'),
      stat('chips-in-use', chipsInUse, 'TPU chips reserved', '#/slices'),
      gpus ? stat('gpus', `${gpus - (avail.GPU || 0)} / ${gpus}`, 'GPUs reserved') : null,
      stat('slices', slices.length, 'slices', '#/slices'),
      stat('runs', `${activeRuns} / ${runList.length}`, 'runs active / all', '#/runs'),
      stat('jobs', `${activeJobs} / ${jobList.length}`, 'jobs active / all', '#/jobs'),
    ]);

    const sliceStates = countBy(slices, 'state');
    const runStates = countBy(runList, 'status');
    const jobStates = countBy(jobList, 'status');
    renderIfChanged(states, [sliceStates, runStates, jobStates], () => [
      section('Slices by state', counts('slices', sliceStates, ['READY', 'RESERVED', 'DEGRADED', 'INCOMPLETE'])),
      section('Runs by status', counts('runs', runStates, ['RUNNING', 'PENDING', 'RESTARTING', 'SUCCEEDED', 'FAILED'])),
      section('Jobs by status', counts('jobs', jobStates, ['RUNNING', 'PENDING', 'SUCCEEDED', 'FAILED', 'STOPPED'])),
    ]);

    const now = Date.now();
    const rows = (cluster.pending || []).map((g) => [g.id, g.name, g.kind, g.request, g.state, g.reason,
      g.created_time_ms]);
    renderIfChanged(pending, rows.map((r) => r.slice(0, 6)), () => (rows.length === 0
      ? empty('Nothing is waiting.')
      : table(['group', 'kind', 'request', 'state', 'waiting', 'reason'],
        rows.map(([id, name, kind, request, state, reason, created]) => h('tr', { dataset: { group: id } },
          h('td', {}, name ? `${name} (${id})` : id),
          h('td', {}, kind),
          h('td', {}, request),
          h('td', {}, badge(state)),
          h('td', {}, created ? fmtDuration(now - created) : '–'),
          h('td', { class: 'reason' }, reason || '–'))))));
  }

  return { refresh };
}
