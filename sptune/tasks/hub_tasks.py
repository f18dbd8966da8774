"""The Hugging Face Hub tasks: text (IMDb), image / scifar (CIFAR-10), speech-commands (Speech
Commands v0.02). Where their data is looked for: sptune/tasks/hub.py."""

from __future__ import annotations

from sptune.tasks.base import Task
from sptune.tasks.hub import RELEASES, verify_hub_task
from sptune.tasks.hub_convert import SC_CLASSES, SC_RATE, load_hub_task
from sptune.tasks.hub_prepare import prepare_hub_task
from sptune.tasks.lra import BYTE_VOCAB_SIZE


def _hint(name: str, subdir: str, hub_id: str) -> str:
    return (f"`sptune data prepare {name} --from {RELEASES[subdir]}` (or a save_to_disk dir, parquet files, "
            f"or `--from hub`) writes <data root>/{subdir}/; without it the loader uses {hub_id} from the "
            f"Hugging Face cache / Hub")


TEXT = Task(
    name="text",
    seq_len=4096,
    input_kind="tokens",
    num_classes=2,
    metric="accuracy",
    mask_ratio=0.15,  # paper §2
    pretrain_loss="ce",
    loader=load_hub_task,
    vocab_size=BYTE_VOCAB_SIZE,
    data_subdir="imdb",
    data_hint=_hint("text", "imdb", "stanfordnlp/imdb"),
    description="LRA Text: IMDb sentiment at byte level, truncated to 4096 bytes; val = 10% of train.",
    extras={"hub_id": "stanfordnlp/imdb", "val_fraction": 0.1, "split_seed": 0},
    verifier=verify_hub_task,
    preparer=prepare_hub_task,
)

IMAGE = Task(
    name="image",
    seq_len=1024,
    input_kind="continuous",
    num_classes=10,
    metric="accuracy",
    mask_ratio=0.5,  # paper §2
    pretrain_loss="l1",
    loader=load_hub_task,
    channels=1,
    data_subdir="cifar10",
    data_hint=_hint("image", "cifar10", "uoft-cs/cifar10"),
    description="LRA Image: grayscale CIFAR-10 as 1024 normalised pixels; val = 10% of train.",
    extras={"hub_id": "uoft-cs/cifar10", "val_fraction": 0.1, "split_seed": 0},
    verifier=verify_hub_task,
    preparer=prepare_hub_task,
)

SCIFAR = Task(
    name="scifar",
    seq_len=1024,
    input_kind="continuous",
    num_classes=10,
    metric="accuracy",
    mask_ratio=0.5,  # Appendix C.3
    pretrain_loss="l1",
    loader=load_hub_task,
    channels=3,
    data_subdir="cifar10",
    data_hint=_hint("scifar", "cifar10", "uoft-cs/cifar10"),
    description="sCIFAR: CIFAR-10 as 1024 normalised RGB pixels; val = 10% of train.",
    extras={"hub_id": "uoft-cs/cifar10", "val_fraction": 0.1, "split_seed": 0},
    verifier=verify_hub_task,
    preparer=prepare_hub_task,
)

SPEECH_COMMANDS = Task(
    name="speech-commands",
    seq_len=SC_RATE,
    input_kind="continuous",
    num_classes=len(SC_CLASSES),
    metric="accuracy",
    mask_ratio=0.25,  # Appendix C.3
    pretrain_loss="l1",
    loader=load_hub_task,
    channels=1,
    data_subdir="speech_commands",
    data_hint=_hint("speech-commands", "speech_commands", "google/speech_commands v0.02"),
    description="Speech Commands v0.02, 35 words, raw 16 kHz waveforms (16000 x 1). The release archive "
                "gives S4's split (validation_list / testing_list); the Hub copy's test split is the "
                "separate v0.02 test-set archive instead.",
    # The Hub repository is a loading script, which `datasets` >= 4 no longer runs; its parquet
    # conversion branch holds the same splits.
    extras={"hub_id": "google/speech_commands", "hub_config": "v0.02", "hub_revision": "refs/convert/parquet"},
    verifier=verify_hub_task,
    preparer=prepare_hub_task,
)

TASKS: list[Task] = [TEXT, IMAGE, SCIFAR, SPEECH_COMMANDS]
