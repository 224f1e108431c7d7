// DOM and SVG helpers. Every string from the logs (layer and model names) goes in as a text
// node or an attribute value, never as markup: a layer named `<img src=x onerror=...>` shows as text.

export const SVG_NS = 'http://www.w3.org/2000/svg';

export const HARM = {
  cause: {colour: '#d62728', words: 'cause: damages the output on its own'},
  inherits: {colour: '#f5a623', words: 'inherits: damaged by an earlier cause'},
  fine: {colour: '#2ca02c', words: 'fine'},
  float: {colour: '#c7c7c7', words: 'float (not quantized)'},
  unknown: {colour: '#c7c7c7', words: 'not analysed'},
};

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function setProps(node, props) {
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'on') {
      for (const [event, handler] of Object.entries(value)) node.addEventListener(event, handler);
    } else if (key === 'text') {
      node.textContent = String(value);
    } else {
      node.setAttribute(key, String(value));
    }
  }
  return node;
}

/** An HTML element: el('p', {class: 'x'}, 'text', child, ...). */
export function el(tag, props, ...children) {
  return append(setProps(document.createElement(tag), props), children);
}

/** An SVG element: svg('rect', {x: 1, y: 2}); strings among children become text nodes. */
export function svg(tag, attrs, ...children) {
  return append(setProps(document.createElementNS(SVG_NS, tag), attrs), children);
}

export function db(value) {
  return value === null || value === undefined ? 'n/a' : `${value.toFixed(1)} dB`;
}

export function kib(bytes) {
  return bytes === null || bytes === undefined ? 'n/a' : `${(bytes / 1024).toFixed(1)} KiB`;
}

export function quantizerName(q) {
  return `${q.name} ${q.kind === 'activation' ? 'output' : 'weights'}`;
}

export function memoryWords(memory) {
  if (!memory) return 'n/a';
  return `weights ${kib(memory.weights_float_bytes)} → ${kib(memory.weights_bytes)}, ` +
    `activations ${kib(memory.activation_float_bytes)} → ${kib(memory.activation_bytes)} per sample`;
}

/** A name cut to `max` characters for a drawing (the whole name stays in its tooltip). */
export function short(name, max) {
  const text = String(name);
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

export async function getJson(route) {
  const response = await fetch(route);
  if (!response.ok) throw new Error(`${route}: ${response.status} ${await response.text()}`);
  return response.json();
}
