"""Draft models for the builtin engine: distillation from a target, the draft format, screening.

    specpilot distill --layers 4 --minutes 30 --out build/drafts/d4     # make a draft
    specpilot screen-drafts --draft d4=build/drafts/d4 --ks 1,2,3,4     # rank drafts (R3)

Modules: ``model`` (a draft's initial layers; the directory format and restricted head are
``specpilot.engine.draft_format``), ``corpora`` (offline prompts),
``teacher`` (target continuations + top-k log-probs), ``distill`` (trainer), ``recipe`` (the
command's pipeline), ``screening`` (measured ranking, acceptance replay).
"""

from specpilot.draft.model import default_init_layers, make_draft
from specpilot.engine.draft_format import (
    RestrictedHead,
    is_draft_dir,
    load_draft_dir,
    save_draft_dir,
    shipped_draft_path,
)

__all__ = [
    "RestrictedHead",
    "default_init_layers",
    "is_draft_dir",
    "load_draft_dir",
    "make_draft",
    "save_draft_dir",
    "shipped_draft_path",
]
