// Who holds what: slices and chips traced from their reservation (placement group) to the run or job using it.

const LIVE_GROUP = new Set(['CREATED', 'RESCHEDULING', 'PENDING']);
const ACTIVE_RUN = new Set(['PENDING', 'RUNNING', 'RESTARTING']);

// groups: GET /api/v0/placement_groups; runs: GET /api/v0/runs.
// → {groupById, holderOfGroup(id) → {kind: 'run'|'job'|'group', id, name, href}, chip(nodeId, chip) → {...}}
export function ownership(groups, runs) {
  const groupById = new Map();
  for (const g of groups || []) groupById.set(g.id, g);
  const runByGroup = new Map();
  for (const r of runs || []) {
    // Oldest first: a group id is never reused, but prefer an active run if several name it.
    if (!runByGroup.has(r.group_id) || ACTIVE_RUN.has(r.status)) runByGroup.set(r.group_id, r);
  }

  function holderOfGroup(id) {
    if (!id) return null;
    const run = runByGroup.get(id);
    if (run) return { kind: 'run', id: run.run_id, name: run.name, status: run.status, href: `#/runs/${encodeURIComponent(run.run_id)}` };
    const g = groupById.get(id);
    if (g && typeof g.name === 'string' && g.name.startsWith('job:')) {
      const job = g.name.slice(4);
      return { kind: 'job', id: job, name: job, href: `#/jobs/${encodeURIComponent(job)}` };
    }
    return { kind: 'group', id, name: g && g.name ? g.name : id, href: null };
  }

  // Chips reserved by live groups, and the rank of an active run on each.
  const chips = new Map(); // `${node}/${chip}` → {holder, rank}
  for (const g of groups || []) {
    if (!LIVE_GROUP.has(g.state)) continue;
    const holder = holderOfGroup(g.id);
    for (const b of g.bundles || []) {
      for (const c of b.chips || []) chips.set(`${b.node_id}/${c}`, { holder, rank: null });
    }
  }
  for (const r of runs || []) {
    if (!ACTIVE_RUN.has(r.status) || !Array.isArray(r.attempts) || r.attempts.length === 0) continue;
    const attempt = r.attempts[r.attempts.length - 1];
    if (attempt.end_time_ms) continue;
    const holder = { kind: 'run', id: r.run_id, name: r.name, status: r.status, href: `#/runs/${encodeURIComponent(r.run_id)}` };
    for (const rank of attempt.ranks || []) {
      if (rank.exited) continue;
      for (const c of rank.chips || []) chips.set(`${rank.node_id}/${c}`, { holder, rank: rank.rank });
    }
  }

  return {
    groupById,
    holderOfGroup,
    chip: (nodeId, chip) => chips.get(`${nodeId}/${chip}`) || null,
  };
}
