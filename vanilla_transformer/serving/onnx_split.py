"""The merged decoder split in two for onnxruntime: the cross-attention keys and values computed once, then one graph
for every step.

The exported ``decoder_model_merged.onnx`` (the layout transformers.js reads) holds one ``If`` on
``use_cache_branch``: the first step projects the encoder output into each layer's cross-attention keys and values
(the ``else`` branch), the later ones copy them from the cache inputs (the ``then`` branch, one ``Identity`` per
tensor). Run as it is, every later step pays that copy, the ``If`` copies its outputs once more, and the graph writes
the unchanged encoder keys and values out again: at the small size and beam 4 about 40% of the decoder's time
(onnxruntime's profile, issue 44). `split_merged_decoder` builds, in memory, from the merged graph:

* the memory graph: ``encoder_hidden_states`` -> ``present.{i}.encoder.key|value`` (the ``else`` branch alone);
* the step graph: the merged graph with the ``If`` replaced by its ``then`` branch's sources, so that the attention
  reads the cache inputs directly, and only ``logits`` and ``present.{i}.decoder.key|value`` as outputs. It serves
  the first step too, with an empty self-attention cache.

Only the weights each graph uses are kept in it, so no weight is held twice. A merged graph of another shape (not
one ``If`` whose ``then`` branch copies the encoder cache inputs) is not split: `split_merged_decoder` returns None
and the merged graph serves as exported.
"""

from __future__ import annotations

from collections.abc import Iterable

STEP_OUTPUTS_PREFIXES = ("logits", "present.")
"""What the step graph keeps of the merged graph's outputs: the logits and the self-attention cache."""


def split_merged_decoder(model) -> tuple[bytes, bytes] | None:
    """(memory graph, step graph) of the merged decoder `model` (an ``onnx.ModelProto``), serialized; None where
    the merged graph does not have the expected shape (see the module)."""
    from onnx import helper

    graph = model.graph
    branches = _cache_branches(graph)
    if branches is None:
        return None
    node, then_branch, else_branch = branches
    sources = dict(zip(node.output, (n.input[0] for n in then_branch.node), strict=True))  # If output -> cache input
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    # The memory graph: the else branch, with what it reads from the outer graph.
    renamed = dict(zip((value.name for value in else_branch.output), node.output, strict=True))
    memory_nodes = [_renamed(n, renamed) for n in else_branch.node]
    needed = _reads(memory_nodes) - {out for n in memory_nodes for out in n.output}
    outer_nodes = _producers(graph.node, needed, stop=set(initializers) | {i.name for i in graph.input})
    memory_nodes = outer_nodes + memory_nodes
    reads = _reads(memory_nodes)
    memory_inputs = [value for value in graph.input if value.name in reads]
    if [value.name for value in memory_inputs] != ["encoder_hidden_states"]:
        return None
    memory = helper.make_graph(
        memory_nodes,
        "cross_attention_memory",
        memory_inputs,
        [helper.make_tensor_value_info(name, 1, None) for name in node.output],
        [initializers[name] for name in sorted(reads & set(initializers))],
    )
    # The step graph: the If's outputs read from the cache inputs, the outputs the steps need.
    step_nodes = [_renamed(n, sources, outputs=False) for n in graph.node if n is not node]
    kept_outputs = [v for v in graph.output if v.name.startswith(STEP_OUTPUTS_PREFIXES) and v.name not in sources]
    step_nodes = _producers(step_nodes, {v.name for v in kept_outputs}, stop=set())
    reads = _reads(step_nodes) | {v.name for v in kept_outputs}
    step = helper.make_graph(
        step_nodes,
        "decoder_step",
        [value for value in graph.input if value.name in reads],
        kept_outputs,
        [initializers[name] for name in sorted(reads & set(initializers))],
    )
    return tuple(
        helper.make_model(g, opset_imports=model.opset_import, ir_version=model.ir_version).SerializeToString()
        for g in (memory, step)
    )


def _cache_branches(graph):
    """The merged graph's one ``If`` with its then and else branches, where the then branch is one ``Identity`` per
    output, each of a ``past_key_values.{i}.encoder.*`` input, and the If's outputs are the matching ``present``
    names; else None."""
    ifs = [node for node in graph.node if node.op_type == "If"]
    if len(ifs) != 1:
        return None
    node = ifs[0]
    branches = {attribute.name: attribute.g for attribute in node.attribute}
    then_branch, else_branch = branches.get("then_branch"), branches.get("else_branch")
    if then_branch is None or else_branch is None or then_branch.initializer or else_branch.initializer:
        return None
    copies = list(then_branch.node)
    outputs = [value.name for value in then_branch.output]
    if len(copies) != len(node.output) or [n.output[0] for n in copies] != outputs:
        return None
    for copy, result in zip(copies, node.output, strict=True):
        expected = result.replace("present.", "past_key_values.", 1)
        if copy.op_type != "Identity" or list(copy.input) != [expected] or ".encoder." not in result:
            return None
    return node, then_branch, else_branch


def _renamed(node, names: dict[str, str], outputs: bool = True):
    """A copy of `node` with its inputs (and outputs, where `outputs`) renamed by `names`."""
    copy = type(node)()
    copy.CopyFrom(node)
    copy.input[:] = [names.get(name, name) for name in node.input]
    if outputs:
        copy.output[:] = [names.get(name, name) for name in node.output]
    return copy


def _reads(nodes: Iterable) -> set[str]:
    return {name for node in nodes for name in node.input if name}


def _producers(nodes, wanted: set[str], stop: set[str]) -> list:
    """The nodes of `nodes` (in their order) that `wanted` values depend on, transitively, not past `stop`."""
    producer = {out: node for node in nodes for out in node.output}
    keep, todo = set(), [name for name in wanted if name not in stop]
    while todo:
        name = todo.pop()
        node = producer.get(name)
        if node is None or id(node) in keep:
            continue
        keep.add(id(node))
        todo += [value for value in node.input if value and value not in stop]
    return [node for node in nodes if id(node) in keep]


__all__ = ["split_merged_decoder"]
