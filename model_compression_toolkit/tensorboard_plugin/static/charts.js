// SVG charts: the error of every quantizer, and the channel ranges of a cause.
import {el, svg, db, short} from './dom.js';

const BARS = [
  ['own_db', 'own error (its own SQNR)', '#1f77b4'],
  ['output_db', 'alone at the output', '#9467bd'],
  ['accumulated_db', 'accumulated (quantized model vs float here)', '#7f7f7f'],
];
const MAX_DB = 60;

/** One row per quantizer (topological order), three bars each: longer is better. */
export function quantizerChart(title, quantizers, causeDb) {
  const label = 230, width = 300, row = 16 * BARS.length + 10, top = 44;
  const height = top + row * quantizers.length + 24;
  const x = (v) => label + Math.max(0, Math.min(MAX_DB, v)) / MAX_DB * width;
  const chart = svg('svg', {class: 'quantizer-chart', width: label + width + 90, height, role: 'img'},
    svg('title', {}, `${title}: SQNR in dB per quantizer, longer is better`),
    svg('text', {x: 0, y: 14, class: 'chart-title'}, `${title}: SQNR (dB), longer is better`));
  BARS.forEach(([, words, colour], i) => {
    chart.append(svg('rect', {x: i * 190, y: 22, width: 10, height: 10, fill: colour}),
      svg('text', {x: i * 190 + 14, y: 31, class: 'legend'}, words));
  });
  quantizers.forEach((q, i) => {
    const y = top + i * row;
    if (q.cause) chart.append(svg('rect', {x: 0, y: y - 2, width: label + width + 90, height: row - 4, class: 'cause-row'}));
    chart.append(svg('text', {x: label - 6, y: y + 12, 'text-anchor': 'end', class: q.cause ? 'axis cause' : 'axis'},
      svg('title', {}, `${q.name} (${q.layer_type}, ${q.bits} bits)`),
      `${short(q.name, 22)} ${q.cause ? '(cause)' : ''}`));
    BARS.forEach(([key, , colour], j) => {
      const value = q[key], by = y + j * 16;
      if (value === null || value === undefined) {
        chart.append(svg('text', {x: label + 4, y: by + 11, class: 'na'}, key === 'output_db' ? 'not measured: own error low' : 'n/a'));
        return;
      }
      chart.append(svg('rect', {x: label, y: by + 2, width: Math.max(1, x(value) - label), height: 12, fill: colour}),
        svg('text', {x: x(value) + 4, y: by + 12, class: 'value'}, db(value)));
    });
  });
  const bound = x(causeDb);
  chart.append(svg('line', {x1: bound, x2: bound, y1: top - 4, y2: height - 20, class: 'bound'}),
    svg('text', {x: bound, y: height - 6, 'text-anchor': 'middle', class: 'legend'}, `${causeDb} dB: under it at the output, a cause`));
  return el('figure', {class: 'chart'}, chart);
}

/** Each channel a bar from its min to its max; outliers red and named; the grid dashed. */
export function channelPicture(cause) {
  const {min, max, grid, outliers, axis} = cause.channels;
  const w = 420, h = 150, left = 44, bottom = 22, n = min.length;
  const values = [...min, ...max, ...(grid || [])];
  const hi = Math.max(...values.map(Math.abs), 1e-12);
  const lo = Math.min(0, ...values);
  const y = (v) => (h - bottom) - (v - lo) / (hi - lo) * (h - bottom - 12);
  const step = (w - left - 10) / Math.max(1, n);
  const outlier = new Set(outliers);
  const picture = svg('svg', {class: 'channel-picture', width: w, height: h, role: 'img'},
    svg('title', {}, `${cause.name}: range of each ${axis}`),
    svg('line', {x1: left, x2: w - 6, y1: y(0), y2: y(0), class: 'zero'}));
  if (grid) {
    for (const g of grid.filter((v) => v !== 0)) {
      picture.append(svg('line', {x1: left, x2: w - 6, y1: y(g), y2: y(g), class: 'grid'}));
    }
    picture.append(svg('text', {x: w - 8, y: y(grid[1]) - 3, 'text-anchor': 'end', class: 'legend'}, 'grid'));
  }
  min.forEach((low, c) => {
    const cx = left + (c + 0.5) * step;
    picture.append(svg('line', {x1: cx, x2: cx, y1: y(max[c]), y2: Math.max(y(low), y(max[c]) + 1),
      class: outlier.has(c) ? 'channel outlier' : 'channel'}));
  });
  outliers.slice(0, 3).forEach((c) => {
    picture.append(svg('text', {x: left + (c + 0.5) * step + 4, y: y(max[c]) + 10, class: 'outlier-label'}, `channel ${c}`));
  });
  picture.append(svg('text', {x: left, y: h - 6, class: 'legend'}, `${axis} (0 – ${n - 1}), min to max`),
    svg('text', {x: 2, y: 12, class: 'legend'}, hi.toPrecision(3)));
  return el('figure', {class: 'channels'}, picture);
}

/** A layer's output values, float (filled) and quantized (outlined), on the same bins; the
 * grid's range dashed; the shares clipped and rounded to zero written out. */
export function histogramPicture(h) {
  const w = 420, h0 = 150, left = 8, bottom = 20, top = 10;
  const lo = h.edges[0], hi = h.edges[h.edges.length - 1];
  const span = hi - lo || 1;
  const x = (v) => left + (v - lo) / span * (w - 2 * left);
  const most = Math.sqrt(Math.max(1, ...h.float, ...h.quantized));
  const y = (count) => (h0 - bottom) - Math.sqrt(count) / most * (h0 - bottom - top);
  const picture = svg('svg', {class: 'histogram', width: w, height: h0, role: 'img'},
    svg('title', {}, 'float and quantized output values'));
  h.float.forEach((count, i) => {
    picture.append(svg('rect', {x: x(h.edges[i]), y: y(count), width: Math.max(1, x(h.edges[i + 1]) - x(h.edges[i])),
      height: (h0 - bottom) - y(count), class: 'float-bar'}));
  });
  h.quantized.forEach((count, i) => {
    if (count > 0) {
      picture.append(svg('rect', {x: x(h.edges[i]), y: y(count), width: Math.max(1, x(h.edges[i + 1]) - x(h.edges[i])),
        height: (h0 - bottom) - y(count), class: 'quantized-bar'}));
    }
  });
  if (h.grid) {
    for (const g of h.grid) {
      if (g >= lo && g <= hi) picture.append(svg('line', {x1: x(g), x2: x(g), y1: top, y2: h0 - bottom, class: 'grid'}));
    }
  }
  const pct = (v) => (v === null || v === undefined ? 'n/a' : `${v.toFixed(1)} %`);
  picture.append(
    svg('text', {x: left, y: h0 - bottom + 14, class: 'legend'}, lo.toPrecision(3)),
    svg('text', {x: w - left, y: h0 - bottom + 14, 'text-anchor': 'end', class: 'legend'}, hi.toPrecision(3)));
  return el('figure', {class: 'node-histogram'}, picture,
    el('figcaption', {}, 'Its output values: float filled blue, quantized outlined orange (height: √count), ',
      'the grid\'s range dashed.'),
    el('p', {class: 'hist-shares'}, `Clipped: ${pct(h.clipped_percent)} · rounded to 0: ${pct(h.zero_rounded_percent)}`));
}
