"""What several test modules share, one module per subject; a test module imports from here,
never from another test module (`tests/test_layout.py` checks it).

- `configs.py`: a config written as a nested dict, resolved as a scenario file is, the default
  model's figures and a workload of one request;
- `runs.py`: every value a run recorded, comparable, and the fast-forward test servers;
- `cluster.py`: cluster scenarios from TOML text and a whole cluster run;
- `cosim.py`: a small cosimulated config, and executors that record and replay step times;
- `sessions.py`: a small multi-turn sessions config and a run built from `run_config`'s pieces;
- `real_engine.py`: prompts served greedily on the real engine, outputs and KV rows kept;
- `traces.py`: trace files written for a test and the one-line error reading one gives;
- `http.py`: a real server of a tiny model on a loopback port, spoken to by aiohttp, and a
  completion request's body;
- `hardware.py`: a small scenario of the hardware cost model as TOML text, and one loaded;
- `model_scenario.py`: a model on a GPU as a scenario file, its setup and its one-line refusal;
- `hf_configs.py`: published config.json files, and writing one;
- `hybrid.py`: Qwen3.5 and Qwen3-Next, hybrids of linear and full attention;
- `fake_openai.py`: a fake OpenAI-compatible server for `servesim bench`, and its scenario;
- `bench.py`: a CSV file's rows, and `servesim bench` run as a user runs it;
- `cli.py`: a scenario loaded from flags, a small scenario file, an error's one line;
- `scenario_files.py`: a scenario file written for a test, and the error loading it gives;
- `search.py`: the scenario of a server whose capacity can be computed, for `servesim search`;
- `outputs.py`: small scenarios, `servesim run` into a folder, and what a command left beside
  its output, for the output tests;
- `validation.py`: a scenario `servesim validate` serves and simulates in a moment.

Fixtures (a tiny model, a seeded rng, a fake executor) are in `tests/conftest.py`.
"""
