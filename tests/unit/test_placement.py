"""Where an in-process judge runs and at what precision: ``device`` and ``dtype``.

This machine is taken to have no GPU unless a test says otherwise (``cuda_devices`` faked):
``auto`` resolves to float32 on the CPU, and a judge configured so hashes as it did before
placement was an option.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rubricsvc.backends import placement
from rubricsvc.backends.kept import loaded_backend_key
from rubricsvc.backends.placement import Placement, resolve
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.config import BUILTIN_JUDGES, JudgeSpec


def _fake_gpus(monkeypatch: pytest.MonkeyPatch, count: int, bf16: bool = True) -> None:
    monkeypatch.setattr(placement, "cuda_devices", lambda: count)
    monkeypatch.setattr(placement, "supports_bfloat16", lambda index: bf16)


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    _fake_gpus(monkeypatch, 0)
    yield


def _judge(**options: object) -> JudgeSpec:
    return JudgeSpec(name="placed", backend="transformers", backend_options=dict(options))


def test_auto_is_float32_on_the_cpu_without_a_gpu() -> None:
    assert resolve() == Placement("cpu", "float32")
    assert resolve("cpu", "bfloat16") == Placement("cpu", "bfloat16")


def test_auto_is_the_first_gpu_in_bfloat16_where_it_computes_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_gpus(monkeypatch, 2)
    assert resolve() == Placement("cuda:0", "bfloat16")
    assert resolve("cuda:1", "float16") == Placement("cuda:1", "float16")
    _fake_gpus(monkeypatch, 1, bf16=False)
    assert resolve("auto", "auto") == Placement("cuda:0", "float32")


def test_a_cuda_device_this_machine_lacks_is_refused_where_a_model_would_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValidationFailed, match="needs a CUDA GPU, and this machine has none"):
        resolve("cuda", here=True)
    _fake_gpus(monkeypatch, 2)
    with pytest.raises(ValidationFailed, match=r"has 2 CUDA device\(s\), cuda:0 to cuda:1"):
        resolve("cuda:2", here=True)
    # Hashing a judge that runs on another machine's GPU takes the device as given.
    assert resolve("cuda:2") == Placement("cuda:2", "bfloat16")


@pytest.mark.model
def test_the_transformers_backend_refuses_cuda_before_reading_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("transformers")
    import transformers

    from rubricsvc.backends.transformers import TransformersBackend

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was read before the device was checked")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", never)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", never)
    with pytest.raises(ValidationFailed, match="device 'cuda' needs a CUDA GPU"):
        TransformersBackend("/nonexistent/model", device="cuda")


@pytest.mark.parametrize(
    ("options", "message"),
    [({"device": "gpu"}, "device 'gpu': choose auto"), ({"dtype": "fp8"}, "dtype 'fp8'")],
)
def test_malformed_placement_is_refused_with_the_choices(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        _judge(**options)


def test_float32_on_the_cpu_adds_nothing_to_the_hash() -> None:
    """Every in-process judge ran so before placement was an option: their hashes (and the
    verdicts cached under them) stay."""
    embedded = BUILTIN_JUDGES["embedded"]
    assert embedded.hashed_settings()["backend_options"] == {}
    same = [_judge(), _judge(device="cpu"), _judge(dtype="float32"), _judge(device="auto")]
    assert {j.config_hash() for j in same} == {_judge().config_hash()}


def test_precision_and_device_are_in_the_hash_never_auto(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cpu32, cpu16 = _judge(dtype="float32"), _judge(dtype="bfloat16")
    assert cpu32.config_hash() != cpu16.config_hash()
    assert cpu16.hashed_settings()["backend_options"] == {"device": "cpu", "dtype": "bfloat16"}
    gpu32 = _judge(device="cuda", dtype="float32")
    assert gpu32.config_hash() not in {cpu32.config_hash(), cpu16.config_hash()}

    _fake_gpus(monkeypatch, 1)
    auto = _judge()
    assert auto.hashed_settings()["backend_options"] == {"device": "cuda", "dtype": "bfloat16"}
    # auto is hashed as what it resolves to; which GPU (its index) is not hashed.
    assert auto.config_hash() == _judge(device="cuda:0", dtype="bfloat16").config_hash()
    assert auto.config_hash() == _judge(device="cuda:3", dtype="bfloat16").config_hash()
    assert auto.config_hash() != cpu32.config_hash()


def test_a_loaded_model_is_keyed_by_its_resolved_placement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert loaded_backend_key(_judge()) == loaded_backend_key(_judge(device="cpu"))
    assert loaded_backend_key(_judge()) != loaded_backend_key(_judge(dtype="bfloat16"))
    _fake_gpus(monkeypatch, 2)
    assert loaded_backend_key(_judge()) == loaded_backend_key(_judge(device="cuda:0"))
    assert loaded_backend_key(_judge()) != loaded_backend_key(_judge(device="cuda:1"))


def test_a_backend_that_does_not_place_its_model_hashes_its_options_as_given() -> None:
    spec = JudgeSpec(name="remote", backend="scripted", backend_options={"dtype": "whatever"})
    assert spec.hashed_settings()["backend_options"] == {"dtype": "whatever"}


def test_a_job_submitted_on_a_cpu_says_why_a_gpu_worker_refuses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rubricsvc.scoring.chunks import placed_elsewhere

    spec = _judge()
    submitted = spec.hashed_settings()  # hashed where the job was submitted: no GPU
    placed_elsewhere(7, submitted, spec)  # the same machine: nothing to say
    _fake_gpus(monkeypatch, 1)
    with pytest.raises(Exception, match=r"on the CPU in float32, and this machine would run it "):
        placed_elsewhere(7, submitted, spec)
