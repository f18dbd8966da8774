"""The Hugging Face Hub tasks: text (IMDb), image / scifar (CIFAR-10), speech-commands (Speech
Commands v0.02). Where their data is looked for: sptune/tasks/hub.py."""

from __future__ import annotations

from typing import Any

from sptune.tasks.base import Task
from sptune.tasks.hub import RELEASES, verify_hub_task
from sptune.tasks.hub_convert import SC_CLASSES, SC_RATE, load_hub_task
from sptune.tasks.hub_prepare import prepare_hub_task
from sptune.tasks.lra import BYTE_VOCAB_SIZE


def _hub_task(name: str, subdir: str, hub_name: str, **fields: Any) -> Task:
    """A classification task read from <data root>/<subdir> or the Hub, with the Hub tasks' loader,
    verifier and preparer; `hub_name` names the Hub dataset in the hint shown when data is missing."""
    hint = (f"`sptune data prepare {name} --from {RELEASES[subdir]}` (or a save_to_disk dir, parquet files, "
            f"or `--from hub`) writes <data root>/{subdir}/; without it the loader uses {hub_name} from the "
            f"Hugging Face cache / Hub")
    return Task(name=name, metric="accuracy", loader=load_hub_task, data_subdir=subdir, data_hint=hint,
                verifier=verify_hub_task, preparer=prepare_hub_task, **fields)


TEXT = _hub_task(
    "text", "imdb", "stanfordnlp/imdb",
    seq_len=4096, input_kind="tokens", num_classes=2, vocab_size=BYTE_VOCAB_SIZE,
    mask_ratio=0.15, pretrain_loss="ce",  # paper §2
    description="LRA Text: IMDb sentiment at byte level, truncated to 4096 bytes; val = 10% of train.",
    extras={"hub_id": "stanfordnlp/imdb", "val_fraction": 0.1, "split_seed": 0},
)

# image and scifar read the same data
_CIFAR10 = {"hub_id": "uoft-cs/cifar10", "val_fraction": 0.1, "split_seed": 0}

IMAGE = _hub_task(
    "image", "cifar10", _CIFAR10["hub_id"],
    seq_len=1024, input_kind="continuous", num_classes=10, channels=1,
    mask_ratio=0.5, pretrain_loss="l1",  # paper §2
    description="LRA Image: grayscale CIFAR-10 as 1024 normalised pixels; val = 10% of train.",
    extras={**_CIFAR10},
)

SCIFAR = _hub_task(
    "scifar", "cifar10", _CIFAR10["hub_id"],
    seq_len=1024, input_kind="continuous", num_classes=10, channels=3,
    mask_ratio=0.5, pretrain_loss="l1",  # Appendix C.3
    description="sCIFAR: CIFAR-10 as 1024 normalised RGB pixels; val = 10% of train.",
    extras={**_CIFAR10},
)

SPEECH_COMMANDS = _hub_task(
    "speech-commands", "speech_commands", "google/speech_commands v0.02",
    seq_len=SC_RATE, input_kind="continuous", num_classes=len(SC_CLASSES), channels=1,
    mask_ratio=0.25, pretrain_loss="l1",  # Appendix C.3
    description="Speech Commands v0.02, 35 words, raw 16 kHz waveforms (16000 x 1). The release archive "
                "gives S4's split (validation_list / testing_list); the Hub copy's test split is the "
                "separate v0.02 test-set archive instead.",
    # The Hub repository is a loading script, which `datasets` >= 4 no longer runs; its parquet
    # conversion branch holds the same splits.
    extras={"hub_id": "google/speech_commands", "hub_config": "v0.02", "hub_revision": "refs/convert/parquet"},
)

TASKS: list[Task] = [TEXT, IMAGE, SCIFAR, SPEECH_COMMANDS]
