// One call's page: the verdict, each cause with its evidence and channel picture, the fix
// as a snippet to paste, every quantizer's error, and the graph coloured by harm.
import {el, db, getJson, memoryWords, quantizerName} from './dom.js';
import {channelPicture, quantizerChart} from './charts.js';
import {graphView} from './graph.js';

function causeCard(cause) {
  const title = `${quantizerName(cause)} (${cause.layer_type}, ${cause.bits} bits)`;
  return el('section', {class: 'cause', 'data-quantizer': quantizerName(cause)},
    el('h3', {}, title),
    el('p', {class: 'impact'}, `Alone, it leaves the output at ${db(cause.output_sqnr_db)}`,
      cause.channel === null ? '' : `; its worst channel is channel ${cause.channel}`, '.'),
    el('ul', {class: 'evidence'}, cause.evidence.map((line) => el('li', {}, line))),
    cause.channels ? channelPicture(cause) : el('p', {class: 'muted'}, 'No channel ranges recorded.'));
}

async function copy(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (error) {
    const area = el('textarea', {class: 'offscreen'}, text);
    document.body.append(area);
    area.select();
    document.execCommand('copy');
    area.remove();
  }
  button.textContent = 'Copied';
  setTimeout(() => { button.textContent = 'Copy'; }, 1500);
}

function fixBlock(fix) {
  if (!fix) return el('section', {class: 'fix'}, el('h3', {}, 'Fix'), el('p', {}, 'Nothing to change.'));
  const button = el('button', {class: 'copy'}, 'Copy');
  button.addEventListener('click', () => copy(fix.code, button));
  return el('section', {class: 'fix'},
    el('h3', {}, 'Fix: paste after your PTQ call, then quantize again with core_config=core_config'),
    fix.spread ? el('p', {}, `The loss is spread: ${fix.spread}`) : null,
    el('div', {class: 'snippet'}, button, el('pre', {}, el('code', {}, fix.code))),
    el('ul', {class: 'effects'}, fix.effects.map((line) => el('li', {}, line))));
}

function facts(page) {
  const items = [
    ['Settings', page.settings], ['Output SQNR', db(page.output_sqnr_db)], ['Memory', memoryWords(page.memory)],
    ['Float layers', page.float_layers.length ? page.float_layers.map((f) => `${f.name} (${f.reason})`).join(', ') : 'none'],
  ];
  if (page.metric) items.push(['Metric', page.metric.in_words]);
  return el('dl', {class: 'facts'}, items.map(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
}

export async function callPage(root, run, back) {
  root.replaceChildren(el('p', {class: 'muted'}, `Loading ${run}…`));
  const page = await getJson(`./call?run=${encodeURIComponent(run)}`);
  const causes = page.causes.length
    ? page.causes.map(causeCard)
    : [el('p', {}, `No quantizer damages the output on its own (each keeps ${page.cause_bound_db} dB or more).`)];
  root.replaceChildren(
    el('nav', {}, el('button', {class: 'link', on: {click: back}}, '← all calls')),
    el('h2', {}, `${page.model}: ${page.run}`),
    el('p', {class: 'verdict'}, page.verdict),
    el('div', {class: 'first-screen'},
      el('div', {class: 'causes'}, el('h3', {}, `Causes (${page.causes.length})`), causes),
      fixBlock(page.fix)),
    facts(page),
    el('h3', {}, 'Every quantizer: own error, alone at the output, accumulated'),
    el('div', {class: 'charts'},
      quantizerChart('Weights', page.quantizers.filter((q) => q.kind === 'weights'), page.cause_bound_db),
      quantizerChart('Outputs (activations)', page.quantizers.filter((q) => q.kind === 'activation'), page.cause_bound_db)),
    el('h3', {}, 'Graph: each quantizer coloured by its own harm (W: weights, out: output); click a layer'),
    graphView(page.graph, page.quantizers));
}
