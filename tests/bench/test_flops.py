import pytest

from bench import flops


def test_dense_counts_two_operations_per_multiply_add():
    # seed 001's first layer: 64 rows, 800 -> 500.
    assert flops.dense(64, 800, 500) == 2 * 64 * 800 * 500 == 51_200_000


def test_conv2d_counts_each_output_times_its_window():
    # 1x64x56x56 -> 64 channels, 3x3, stride 1, pad 1: ResNet's layer1 conv2.
    assert flops.conv2d(1, 64, 64, (56, 56), (3, 3)) == 2 * 64 * 56 * 56 * 64 * 9


def test_grouped_conv2d_sees_only_its_groups_channels():
    assert flops.conv2d(1, 32, 32, (4, 4), (3, 3), groups=32) == 2 * 32 * 16 * 9


def test_conv2d_rejects_channels_not_divisible_into_groups():
    with pytest.raises(ValueError, match="not divisible into 3 groups"):
        flops.conv2d(1, 32, 32, (4, 4), (3, 3), groups=3)


def test_batch_matmul_counts_every_batch():
    assert flops.batch_matmul(4, 128, 64, 128) == 2 * 4 * 128 * 64 * 128


@pytest.mark.parametrize(("size", "kernel", "stride", "pad", "expected"),
                         [(224, 7, 2, 3, 112), (112, 3, 2, 1, 56), (56, 1, 2, 0, 28), (5, 2, 2, 0, 2)])
def test_conv_out_floors_like_torch(size, kernel, stride, pad, expected):
    assert flops.conv_out(size, kernel, stride, pad) == expected
