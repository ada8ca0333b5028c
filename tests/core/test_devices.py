import pytest

from conftest import run_vi
from vi.core import devices
from vi.core.devices import resolve_placement


def test_cpu_defaults_int8_for_ctranslate2_and_fp32_for_torch():
    assert resolve_placement("cpu", "auto", engine="ctranslate2").dtype == "int8"
    placement = resolve_placement("cpu", "auto")
    assert (placement.device, placement.dtype) == ("cpu", "float32")
    import torch

    assert placement.torch_dtype() == torch.float32


def test_explicit_dtype_wins():
    assert resolve_placement("cpu", "float32", engine="ctranslate2").dtype == "float32"


def test_auto_device_is_the_best_one_here():
    import torch

    mps = getattr(torch.backends, "mps", None)
    if torch.cuda.is_available():
        expected = "cuda"
    elif mps is not None and mps.is_available():
        expected = "mps"
    else:
        expected = "cpu"
    assert resolve_placement().device == expected


@pytest.mark.parametrize("device,dtype,message", [
    ("tpu", "auto", "--device"), ("cpu", "fp8", "--dtype"), ("cuda:", "auto", "--device"),
    ("cpu:1", "auto", "--device")])
def test_bad_values_are_refused_with_the_option_named(device, dtype, message):
    with pytest.raises(ValueError, match=message):
        resolve_placement(device, dtype)


def test_asking_for_a_missing_gpu_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="no cuda device"):
        resolve_placement("cuda:0", "auto")


def test_auto_never_picks_mps_for_ctranslate2(pretend_mps):
    assert resolve_placement("auto", engine="torch") == devices.Placement("mps", "float16")
    assert resolve_placement("auto", engine="ctranslate2") == devices.Placement("cpu", "int8")


def test_explicit_mps_is_refused_for_ctranslate2(pretend_mps):
    assert resolve_placement("mps", engine="torch").device == "mps"
    with pytest.raises(ValueError, match="--device mps.*CTranslate2.*no mps backend"):
        resolve_placement("mps", engine="ctranslate2")


def test_llama_cpp_on_a_cuda_device_the_machine_lacks_says_so_as_every_stage_does():
    from vi.core.devices import cuda_device_count
    from vi.core.models.llm import gpu_offload_supported, llama_gpu_layers

    if cuda_device_count("ctranslate2") > 0 or gpu_offload_supported():
        pytest.skip("this machine has a cuda device, or llama.cpp was built with one")
    with pytest.raises(ValueError, match="--device cuda: no cuda device is available here") as caught:
        llama_gpu_layers("cuda")
    assert "reinstall" not in str(caught.value)
    done = run_vi("extract-steps", "--device", "cuda", stdin="")
    assert done.returncode == 2 and "no cuda device is available here" in done.stderr
    assert "reinstall" not in done.stderr
