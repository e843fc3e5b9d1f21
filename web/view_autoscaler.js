// Autoscaler: the head's autoscaler (GET /api/v0/autoscaler): node types with their slices, every slice launched
// (capacity class, phase, age, idle time), what waiting groups wait for, the capacity classes that failed lately,
// and its latest events, newest first. Says so when the head runs without one.

import { h, badge, table, empty, section, renderIfChanged, fmtTime, fmtDuration } from './dom.js';
import { getJson } from './api.js';

export function autoscalerView(root) {
  const body = h('div', { id: 'autoscaler' });
  root.append(h('h1', {}, 'Autoscaler'), body);

  async function refresh() {
    const a = await getJson('/api/v0/autoscaler');
    const now = Date.now();
    const key = [a, Math.floor(now / 5000)];  // ages move every 5 s at most
    renderIfChanged(body, key, () => {
      if (!a.enabled) {
        return empty('The autoscaler is off: the head runs without --autoscaler-config (a `torus up` spec with ' +
          'node_types turns it on).');
      }
      const types = table(['node type', 'shape', 'classes', 'running', 'provisioning', 'min', 'max', 'idle timeout'],
        a.node_types.map((t) => h('tr', { dataset: { nodeType: t.name } },
          h('td', {}, t.name),
          h('td', {}, `${t.accelerator_type} ${t.topology} (${t.hosts_per_slice} × ${t.chips_per_host} chips)`),
          h('td', {}, t.capacity_classes.map((c) => c.class).join(' → ')),
          h('td', {}, String(t.slices.running)),
          h('td', {}, String(t.slices.provisioning)),
          h('td', {}, String(t.min_slices)),
          h('td', {}, String(t.max_slices)),
          h('td', {}, fmtDuration(t.idle_timeout_s * 1000)))), { id: 'autoscaler-types' });
      const slices = a.slices.length === 0 ? empty('No slices launched.') :
        table(['slice', 'node type', 'class', 'phase', 'launched', 'idle'],
          a.slices.map((s) => h('tr', { dataset: { slice: s.name, phase: s.phase } },
            h('td', {}, s.phase === 'RUNNING' ? h('a', { href: `#/slices` }, s.name) : s.name),
            h('td', {}, s.node_type),
            h('td', {}, s.capacity_class),
            h('td', {}, badge(s.phase)),
            h('td', {}, `${fmtDuration(now - s.launched_ms)} ago`),
            h('td', {}, s.idle_since_ms ? fmtDuration(now - s.idle_since_ms) : '–'))), { id: 'autoscaler-slices' });
      const pending = a.pending.length === 0 ? empty('No group waits for the autoscaler.') :
        h('ul', { id: 'autoscaler-pending' }, a.pending.map((p) => h('li', { dataset: { group: p.group } },
          h('code', {}, p.name || p.group), ': ', h('span', { class: 'reason' }, p.note))));
      const failures = a.failures.length === 0 ? empty('No capacity class failed lately.') :
        table(['node type', 'class', 'why', 'when', 'tried again in'],
          a.failures.map((f) => h('tr', { dataset: { nodeType: f.node_type, class: f.capacity_class } },
            h('td', {}, f.node_type), h('td', {}, f.capacity_class), h('td', { class: 'reason' }, f.reason),
            h('td', {}, fmtTime(f.at_ms)), h('td', {}, fmtDuration(f.until_ms - now)))), { id: 'autoscaler-failures' });
      const events = a.events.length === 0 ? empty('Nothing launched or removed yet.') :
        table(['time', 'event', 'slice', 'node type', 'class', ''],
          a.events.slice().reverse().map((e) => h('tr', { dataset: { kind: e.kind } },
            h('td', {}, fmtTime(e.time_ms)), h('td', {}, e.kind), h('td', {}, e.slice), h('td', {}, e.node_type),
            h('td', {}, e.capacity_class), h('td', { class: 'reason' }, e.message))), { id: 'autoscaler-events' });
      return [section('Node types', types), section('Slices', slices), section('Waiting groups', pending),
        section('Failed capacity classes', failures), section('Events', events)];
    });
  }
  return { refresh };
}
