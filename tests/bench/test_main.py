import pytest

from bench.__main__ import main


@pytest.mark.parametrize(("args", "message"), [
    (["--models", "vgg"], "unknown model 'vgg'; known: mlp_b64"),
    (["--peers", "tvm"], "unknown peer 'tvm'; known: numpy"),
    (["--threads", "0"], "thread counts must be at least 1"),
    (["--threads", "two"], "--threads takes numbers separated by commas"),
    (["--repeat", "0"], "--repeat must be at least 1"),
    (["--rounds", "0"], "--rounds must be at least 1"),
])
def test_bad_options_are_usage_errors(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
