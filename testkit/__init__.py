"""What the tests and the benchmarks both drive: real processes on loopback, and waiting on them.

Neither ``src/`` (it is not shipped) nor ``tests/`` (benchmarks are not tests):

* ``ports``: free loopback ports and port ranges;
* ``servers``: a real ``sardeenz serve`` (``ServerProcess``), a pool of them,
  their engine processes, and waiting for an instance's status;
* ``forkserver``: what starts those servers, by forking a process that has imported
  the server once per worker and network namespace;
* ``sim``: one simulated engine process on its own;
* ``proxy``: the standalone proxy on a background thread (``ThreadedProxyServer``);
* ``cluster``: a static-peers cluster of real servers on 127.0.0.x;
* ``streams``: concurrent streaming clients that check every stream;
* ``waiting``: waiting with a bound whose failure says what was waited for
  (``wait_until`` polls, ``within`` awaits);
* ``kube`` and ``kube_pods``: a real kube-apiserver + etcd, and Kubernetes-mode pods on it
  (the harness plays the kubelet).

How it is found (not installed by ``pip install -e .``, which ships ``src/`` only):
pytest puts the repository root on ``sys.path`` (``pythonpath = ["."]`` in
pyproject.toml), every benchmark script inserts it explicitly before its
imports, mypy checks it as a listed file root, and ruff counts it as first-party
(``src = [".", "src"]``).
"""
