"""The runtime floor: the only engine code that reads a ``Profile`` (docs/package_layers.md).

It sits above ``config`` and below the Dagster layer: the composition root (``compose``) turns a
profile into parts (sandbox factory, user simulator, grader, policy, runner factory), and one
function per stage wires journal, parity recorder, serving and executor once.
"""
