import pytest

from vi.core.devices import resolve_placement


def test_cpu_defaults_int8_for_ctranslate2_and_fp32_for_torch():
    assert resolve_placement("cpu", "auto", quantized_ok=True).dtype == "int8"
    placement = resolve_placement("cpu", "auto")
    assert (placement.device, placement.dtype) == ("cpu", "float32")
    import torch

    assert placement.torch_dtype() == torch.float32


def test_explicit_dtype_wins():
    assert resolve_placement("cpu", "float32", quantized_ok=True).dtype == "float32"


def test_auto_device_falls_back_to_what_exists():
    import torch

    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_placement().kind in (expected, "mps")


@pytest.mark.parametrize("device,dtype,message", [
    ("tpu", "auto", "--device"), ("cpu", "fp8", "--dtype")])
def test_bad_values_are_refused_with_the_option_named(device, dtype, message):
    with pytest.raises(ValueError, match=message):
        resolve_placement(device, dtype)


def test_asking_for_a_missing_gpu_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="no cuda device"):
        resolve_placement("cuda:0", "auto")
