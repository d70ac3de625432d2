"""Model ids: what `model` of `POST /v1/audio/speech` may name and `GET /v1/models` lists. One engine serves them all.

A client names the model the way its own world does: vLLM users by `served_model_name`, Hugging Face users by the
official repo id (`Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice`), whatever folder the weights were downloaded into;
OpenAI clients by OpenAI's names (`model_aliases`). A name the server does not serve stays a 404.
"""

from __future__ import annotations

from voxgate.engine.base import Engine


def model_ids(engine: Engine, info: dict[str, object], served: list[str], aliases: list[str]) -> list[str]:
    """In order: `served_model_name` (config), `voxgate`, the engine's name, its checkpoint (as given, and its last
    path component), the checkpoint's official repo id (from its config: engine info `repo_id`), `model_aliases`."""
    ids = [*served, "voxgate", engine.name]
    checkpoint = info.get("model")
    if isinstance(checkpoint, str) and checkpoint:
        ids += [checkpoint, checkpoint.rstrip("/").rsplit("/", 1)[-1]]
    repo_id = info.get("repo_id")
    if isinstance(repo_id, str) and repo_id:
        ids.append(repo_id)
    ids += aliases
    return list(dict.fromkeys(ids))


def model_matches(requested: str, ids: list[str]) -> bool:
    """Exact, ignoring case, or by the last path component (`Qwen/X` matches a checkpoint directory `.../X`)."""
    folded = {i.casefold() for i in ids}
    return requested.casefold() in folded or requested.rstrip("/").rsplit("/", 1)[-1].casefold() in folded
