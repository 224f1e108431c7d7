// The graph as SVG, top to bottom: each layer a box holding its quantizers, the weights (W)
// and the output (out), each coloured by its own harm; click a layer for its numbers.
import {el, svg, db, short, HARM} from './dom.js';
import {histogramPicture} from './charts.js';

const BOX = {w: 190, h: 40, gapX: 30, gapY: 34};

function depths(graph) {
  const depth = {};
  const incoming = {};
  for (const [src, dst] of graph.edges) (incoming[dst] = incoming[dst] || []).push(src);
  for (const node of graph.nodes) {  // topological order: every input is placed first
    depth[node.name] = Math.max(-1, ...(incoming[node.name] || []).map((s) => depth[s] ?? -1)) + 1;
  }
  return depth;
}

function details(node, quantizers) {
  const own = quantizers.filter((q) => q.name === node.name);
  const rows = own.map((q) => el('tr', {},
    el('td', {}, q.kind === 'activation' ? 'output' : 'weights'), el('td', {}, `${q.bits} bits`),
    el('td', {}, HARM[q.harm] ? HARM[q.harm].words : q.harm), el('td', {class: 'num'}, db(q.own_db)),
    el('td', {class: 'num'}, q.output_db === null ? 'not measured' : db(q.output_db)),
    el('td', {class: 'num'}, db(q.accumulated_db))));
  return [
    el('h4', {}, `${node.name} (${node.layer_type})`),
    own.length
      ? el('table', {class: 'node-numbers'},
        el('tr', {}, ['quantizer', 'bits', 'harm', 'own SQNR', 'alone at the output', 'accumulated'].map((h) => el('th', {}, h))),
        rows)
      : el('p', {}, 'No quantizer of its own (float, fused into the next layer, or only moving values).'),
    node.histogram ? histogramPicture(node.histogram) : null,
  ];
}

function legend() {
  return el('p', {class: 'legend-row'}, Object.entries(HARM).filter(([k]) => k !== 'unknown').map(([, h]) =>
    el('span', {class: 'legend-item'}, el('span', {class: 'swatch', style: `background:${h.colour}`}), h.words)));
}

export function graphView(graph, quantizers) {
  const depth = depths(graph);
  const columns = {};
  const place = {};
  for (const node of graph.nodes) {
    const d = depth[node.name];
    columns[d] = (columns[d] || 0) + 1;
    place[node.name] = {x: 10 + (columns[d] - 1) * (BOX.w + BOX.gapX), y: 10 + d * (BOX.h + BOX.gapY)};
  }
  const width = 20 + Math.max(1, ...Object.values(columns)) * (BOX.w + BOX.gapX);
  const height = 20 + (Math.max(0, ...Object.values(depth)) + 1) * (BOX.h + BOX.gapY);
  const panel = el('div', {class: 'node-panel'}, el('p', {class: 'muted'}, 'Click a layer for its numbers.'));
  const drawing = svg('svg', {class: 'graph', width, height, role: 'img'});
  for (const [src, dst] of graph.edges) {
    const a = place[src], b = place[dst];
    if (!a || !b) continue;
    const [x1, y1, x2, y2] = [a.x + BOX.w / 2, a.y + BOX.h, b.x + BOX.w / 2, b.y];
    if (depth[dst] - depth[src] > 1 && a.x === b.x) {  // a skip connection: around the layers between, on the right
      const side = a.x + BOX.w + BOX.gapX / 2;
      drawing.append(svg('path', {d: `M ${a.x + BOX.w} ${a.y + BOX.h / 2} C ${side} ${a.y + BOX.h / 2}, ${side} ${b.y + BOX.h / 2}, ` +
        `${b.x + BOX.w} ${b.y + BOX.h / 2}`, class: 'edge skip'}));
    } else {
      drawing.append(svg('line', {x1, y1, x2, y2, class: 'edge'}));
    }
  }
  for (const node of graph.nodes) {
    const {x, y} = place[node.name];
    const group = svg('g', {class: 'node', 'data-layer': node.name, tabindex: 0},
      svg('title', {}, `${node.name} (${node.layer_type})`),
      svg('rect', {x, y, width: BOX.w, height: BOX.h, rx: 4, class: 'node-box'}),
      svg('text', {x: x + 6, y: y + 16, class: 'node-name'}, short(node.name, 20)),
      svg('text', {x: x + 6, y: y + 32, class: 'node-type'}, short(node.layer_type, 14)));
    [['weights', 'W', node.weights_bits], ['output', 'out', node.activation_bits]].forEach(([key, tag, bits], i) => {
      const harm = node[key];
      if (!harm) return;
      const qx = x + BOX.w - 70 + i * 34;
      group.append(svg('rect', {x: qx, y: y + 6, width: 30, height: 28, rx: 3, fill: HARM[harm].colour,
        class: `quantizer ${harm}`, 'data-quantizer': key}),
      svg('text', {x: qx + 15, y: y + 18, 'text-anchor': 'middle', class: 'q-tag'}, tag),
      svg('text', {x: qx + 15, y: y + 30, 'text-anchor': 'middle', class: 'q-tag'}, bits ? `${bits}b` : ''));
    });
    const select = () => {
      drawing.querySelectorAll('.node.selected').forEach((g) => g.classList.remove('selected'));
      group.classList.add('selected');
      panel.replaceChildren(...details(node, quantizers).filter(Boolean));
    };
    group.addEventListener('click', select);
    group.addEventListener('keydown', (event) => { if (event.key === 'Enter') select(); });
    drawing.append(group);
  }
  return el('div', {class: 'graph-view'}, legend(), el('div', {class: 'graph-row'}, el('div', {class: 'graph-scroll'}, drawing), panel));
}
