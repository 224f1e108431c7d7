// The Quantization dashboard's entry point: TensorBoard imports this module in the plugin's
// iframe and calls render(). The call to open comes from TensorBoard's URL:
// http://localhost:6006/#quantization&run=<call> (the console's last line prints it).
import {el, getJson, db, memoryWords} from './static/dom.js';
import {callPage} from './static/page.js';

function runFromUrl() {
  const hashes = [];
  try { hashes.push(window.parent.location.hash, window.parent.location.search); } catch (e) { /* another origin */ }
  hashes.push(window.location.hash);
  for (const text of hashes) {
    for (const part of String(text || '').replace(/^[#?]/, '').split('&')) {
      const [key, value] = part.split('=');
      if (key === 'run' && value) return decodeURIComponent(value.replace(/\+/g, ' '));
    }
  }
  return null;
}

function style() {
  return el('link', {rel: 'stylesheet', href: './static/style.css'});
}

async function landing(root, open) {
  root.replaceChildren(el('p', {class: 'muted'}, 'Loading the calls…'));
  const {logdir, calls} = await getJson('./calls');
  if (!calls.length) {
    root.replaceChildren(el('p', {}, `No quantization call in ${logdir}.`));
    return;
  }
  const head = ['Call', 'Model', 'Settings', 'Output SQNR', 'Memory', 'Float layers', 'Metric', 'Verdict'];
  const rows = calls.map((call) => el('tr', {class: 'call-row'},
    el('td', {}, el('button', {class: 'link', 'data-run': call.run, on: {click: () => open(call.run)}}, call.run)),
    el('td', {}, call.model), el('td', {}, call.settings), el('td', {class: 'num'}, db(call.output_sqnr_db)),
    el('td', {}, memoryWords(call.memory)), el('td', {class: 'num'}, call.float_layers),
    el('td', {}, call.metric ? call.metric.in_words : '—'), el('td', {}, call.verdict)));
  root.replaceChildren(
    el('h2', {}, `Quantization calls in ${logdir}`),
    el('p', {class: 'muted'}, 'Newest first. Open a call for its causes, its fix and every quantizer.'),
    el('table', {class: 'calls'}, el('thead', {}, el('tr', {}, head.map((h) => el('th', {}, h)))), el('tbody', {}, rows)));
}

/** TensorBoard's URL names the call shown, so a reload or a shared link opens it again. */
function remember(run) {
  try {
    const hash = run ? `#quantization&run=${encodeURIComponent(run)}` : '#quantization';
    window.parent.history.replaceState(window.parent.history.state, '', hash);
  } catch (e) { /* TensorBoard in another origin: the URL stays as it is */ }
}

export async function render() {
  const root = el('main', {id: 'quantization'});
  document.head.append(style());
  document.body.replaceChildren(root);
  const show = async (run) => {
    try {
      if (run) await callPage(root, run, () => { remember(null); show(null); });
      else await landing(root, (chosen) => { remember(chosen); show(chosen); });
    } catch (error) {
      root.replaceChildren(el('p', {class: 'error'}, String(error)), el('button', {on: {click: () => show(null)}}, 'All calls'));
    }
  };
  await show(runFromUrl());
}
