"""``python tests/tiny_server.py PORT``: the specpilot server over the tests' tiny random engine
(SmolLM2's tokenizer, no draft, one torch thread) in a process of its own, for tests that time
the server from outside (a client in the same process would share its interpreter)."""

from __future__ import annotations

import sys

import torch
import uvicorn

from specpilot.engine.loader import default_target_path, load_tokenizer
from specpilot.serve import ServerConfig, create_app
from test_server import MODEL, TOKEN, make_engine  # this folder is the script's: on sys.path

if __name__ == "__main__":
    torch.set_num_threads(1)
    engine = make_engine(load_tokenizer(default_target_path()), draft=False)
    app = create_app(ServerConfig(model_name=MODEL, admin_token=TOKEN), engine=engine)
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error")
