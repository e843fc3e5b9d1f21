// Where each host and chip of a TPU slice sits in its topology grid (tpu.md §2: chips-per-host bounds and host
// bounds). Hosts are laid out by worker id with x fastest, then y, then z; chips of a host likewise by index.
//
//   layout({topology: '4x4', chips_per_host: 4, expected_hosts: 4})
//     → {hostBounds: [2, 2, 1], chipBounds: [2, 2, 1], hostAt(2) = [0, 1, 0], chipAt(3) = [1, 1, 0]}

const CHIP_BOUNDS = { 1: [1, 1, 1], 2: [1, 2, 1], 4: [2, 2, 1], 8: [2, 4, 1] };

function parseTopology(text) {
  const dims = String(text || '').toLowerCase().split('x').map((d) => Number.parseInt(d, 10));
  if (dims.length < 2 || dims.length > 3 || dims.some((d) => !Number.isFinite(d) || d < 1)) return null;
  while (dims.length < 3) dims.push(1);
  return dims;
}

export function layout(slice) {
  const hosts = Math.max(1, slice.expected_hosts || (slice.hosts || []).length || 1);
  let cph = slice.chips_per_host || 0;
  if (!cph) cph = Math.max(0, ...(slice.hosts || []).map((x) => x.chips || 0));
  cph = Math.max(1, cph);
  let chipBounds = CHIP_BOUNDS[cph] || [cph, 1, 1];
  let hostBounds = null;
  const dims = parseTopology(slice.topology);
  if (dims) {
    const hb = dims.map((d, i) => d / chipBounds[i]);
    if (hb.every((d) => Number.isInteger(d) && d >= 1) && hb[0] * hb[1] * hb[2] === hosts) hostBounds = hb;
  }
  if (!hostBounds) {
    // A shape this page does not know: draw the hosts in a row, each with its chips in a row.
    hostBounds = [hosts, 1, 1];
    chipBounds = [cph, 1, 1];
  }
  const [hx, hy] = hostBounds;
  const [cx, cy] = chipBounds;
  return {
    hosts,
    chipsPerHost: cph,
    hostBounds,
    chipBounds,
    hostAt: (w) => [w % hx, Math.floor(w / hx) % hy, Math.floor(w / (hx * hy))],
    chipAt: (i) => [i % cx, Math.floor(i / cx) % cy, Math.floor(i / (cx * cy))],
  };
}
