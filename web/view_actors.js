// Actors: the head's directory (GET /api/v0/actors), newest first: class, name, state, lifetime (detached: owned by
// the head), node, pid, restarts and the cause of death.

import { h, badge, table, empty, renderIfChanged, fmtTime } from './dom.js';
import { getOptional, enc } from './api.js';

export function actorsView(root) {
  const body = h('div', { id: 'actors-list' });
  root.append(h('h1', {}, 'Actors'), body);

  async function refresh() {
    const actors = (await getOptional('/api/v0/actors')) || [];
    const rows = actors.map((a) => [a.actor_id, a.class_name, a.name ? `${a.namespace}/${a.name}` : '', a.state,
      a.node_id, a.pid, a.restarts, a.max_restarts, a.create_time_ms, a.death_cause, a.job_id, a.is_detached]);
    renderIfChanged(body, rows, () => (rows.length === 0 ? empty('No actors yet. Create one with `@torus.remote` on a class.') :
      table(['actor', 'class', 'name', 'state', 'lifetime', 'node', 'pid', 'restarts', 'created', 'job', 'death cause'],
        rows.map(([id, cls, name, state, nodeId, pid, restarts, maxRestarts, created, cause, job, detached]) =>
          h('tr', { dataset: { actor: id, state } },
            h('td', {}, h('code', {}, id.slice(0, 12))),
            h('td', {}, cls),
            h('td', {}, name || '–'),
            h('td', {}, badge(state)),
            h('td', { class: 'small' }, detached ? 'detached' : 'owner'),
            h('td', {}, nodeId ? h('a', { href: `#/nodes/${enc(nodeId)}` }, nodeId) : '–'),
            h('td', {}, pid ? String(pid) : '–'),
            h('td', {}, `${restarts} / ${maxRestarts < 0 ? '∞' : maxRestarts}`),
            h('td', {}, fmtTime(created)),
            h('td', { class: 'muted small' }, job),
            h('td', { class: 'reason' }, cause || ''))), { id: 'actors-table' })));
  }
  return { refresh };
}
