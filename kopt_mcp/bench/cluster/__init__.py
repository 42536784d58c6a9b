"""Beyond one host: measuring jobs on a Ray cluster (`[cluster] ray_address`; `pip install "kopt-mcp[ray]"`).

- `shipping`: snapshots to nodes as git packs (BEST's tree once, a candidate as its thin pack
  against BEST), run folders back, paths and environment mapped (pure; no Ray);
- `node`: `NodeJob`, the lease actor's work on its node (idle gate, measure/profile there);
- `ray_executor`: `RayExecutor` / `RayLease`, the kopt_mcp.bench.executor protocols over Ray;
- `testing`: a per-node fake GPU probe replaying recorded nvidia-smi output (tests, demos).

Importing this package does not import Ray; `ray_executor` does (ImportError with the install line).
"""
