"""Page workers: reads rendered by other processes than the hub. `pool.py`: the hub's side (the pool that
starts and restarts them, the proxy that hands them requests); `worker.py`: one worker process."""
