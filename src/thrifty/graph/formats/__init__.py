"""Task-graph file formats, one module per job.

* :mod:`~thrifty.graph.formats.common`: :class:`TaskGraphFile`, ids, numbers and the checks
  every reader shares (each error names the file and what is wrong);
* :mod:`~thrifty.graph.formats.nx`: :class:`~thrifty.graph.taskgraph.TaskGraph` to and from
  a :class:`networkx.DiGraph` (the node-link attribute shapes);
* :mod:`~thrifty.graph.formats.node_link`: networkx node-link JSON, through
  :func:`networkx.node_link_graph` and :func:`networkx.node_link_data`;
* :mod:`~thrifty.graph.formats.ours`: thrifty's own JSON (``docs/taskgraph-json.md``);
* :mod:`~thrifty.graph.formats.dot`: Graphviz DOT (a reader of our own, for the measured
  reasons given there).

:mod:`thrifty.graph.taskgraph_io` is the public entry point over all of them.
"""
