"""What several test modules share, one module per subject; a test module imports from here,
never from another test module (`tests/test_layout.py` checks it).

- `configs.py`: a config written as a nested dict, resolved as a scenario file is;
- `runs.py`: every value a run recorded, comparable, and the fast-forward test servers;
- `cluster.py`: cluster scenarios from TOML text and a whole cluster run;
- `cosim.py`: a small cosimulated config, and executors that record and replay step times;
- `sessions.py`: a small multi-turn sessions config and a run built from `run_config`'s pieces;
- `real_engine.py`: prompts served greedily on the real engine, outputs and KV rows kept;
- `traces.py`: trace files written for a test and the one-line error reading one gives;
- `http.py`: a real server of a tiny model on a loopback port, spoken to by aiohttp;
- `hardware.py`: a small scenario of the hardware cost model as TOML text.

Fixtures (a tiny model, a seeded rng, a fake executor) are in `tests/conftest.py`.
"""
