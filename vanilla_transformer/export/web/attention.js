// The page's attention view: the cross-attention of the chosen translation for a chosen layer and head, as a table
// (rows: output tokens, columns: source tokens, darker: more weight), computed in the page from the merged decoder's
// cross_attentions.{i} outputs (search.js crossAttention).
const element = (id) => document.getElementById(id);

function fillChoices(select, count, name) {
  select.replaceChildren(
    ...Array.from({ length: count }, (_, i) => new Option(`${name} ${i + 1}`, String(i))),
  );
}

function cell(tag, text) {
  const node = document.createElement(tag);
  node.textContent = text;
  return node;
}

function drawTable(table, weights, sources, outputs) {
  const head = document.createElement('tr');
  head.append(cell('th', ''), ...sources.map((token) => cell('th', token)));
  const rows = weights.map((row, t) => {
    const line = document.createElement('tr');
    const cells = row.map((weight) => {
      const node = cell('td', weight.toFixed(2));
      node.style.background = `rgba(31, 119, 180, ${weight.toFixed(3)})`;
      node.title = String(weight);
      return node;
    });
    line.append(cell('th', outputs[t]), ...cells);
    return line;
  });
  table.replaceChildren(head, ...rows);
}

// Show `attention` (layers x heads x [output][source]) with the token strings `sources` and `outputs`.
export function showAttention(attention, sources, outputs) {
  const view = element('vt-attention');
  const [layer, head, table] = ['vt-layer', 'vt-head', 'vt-attention-map'].map(element);
  fillChoices(layer, attention.length, 'Layer');
  fillChoices(head, attention[0].length, 'Head');
  layer.value = String(attention.length - 1);
  head.value = '0';
  const draw = () => {
    const weights = attention[Number(layer.value)][Number(head.value)];
    view.dataset.weights = JSON.stringify(weights);
    drawTable(table, weights, sources, outputs);
  };
  layer.onchange = draw;
  head.onchange = draw;
  draw();
  view.hidden = false;
}

export function hideAttention() {
  const view = element('vt-attention');
  view.hidden = true;
  delete view.dataset.weights;
  element('vt-attention-map').replaceChildren();
}
