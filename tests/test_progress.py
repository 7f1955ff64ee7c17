"""The sweep's progress bar: one line per finished configuration where stderr is no terminal (CI
logs), a bar rewritten in place with \\r on a terminal."""

import io

from bandwidth.progress import Progress, bar


def test_the_bar_fills_from_an_arrow_to_full():
    assert bar(0, 8, width=8) == "[>       ] 0/8"
    assert bar(3, 8, width=8) == "[===>    ] 3/8"
    assert bar(8, 8, width=8) == "[========] 8/8"


def test_without_a_terminal_each_configuration_is_one_line():
    out = io.StringIO()             # isatty() is False
    progress = Progress(2, out)
    progress.start(0, "local flat 1M cpu x2")          # nothing: a log wants finished lines only
    progress.finish(1, "local flat 1M cpu x2: 2.5 GB/sec per gpu")
    progress.start(1, "nccl flat 1M cpu x2")
    progress.finish(2, "nccl flat 1M cpu x2: 0.3 GB/sec per gpu")
    progress.close()
    assert out.getvalue() == (f"{bar(1, 2)} local flat 1M cpu x2: 2.5 GB/sec per gpu\n"
                              f"{bar(2, 2)} nccl flat 1M cpu x2: 0.3 GB/sec per gpu\n")


def test_on_a_terminal_the_bar_is_rewritten_in_place():
    out = io.StringIO()
    progress = Progress(2, out, tty=True)
    progress.start(0, "local flat 1M cpu x2")
    progress.finish(1, "local: 2.5")
    progress.finish(2, "nccl: 0.3")
    progress.close()
    text = out.getvalue()
    assert "\n" not in text[:-1] and text.endswith("\n")     # one line, ended once
    frames = text[:-1].split("\r")[1:]
    assert frames[0] == f"{bar(0, 2)} local flat 1M cpu x2 ..."
    # a shorter frame is padded with blanks over what the longer one left on the screen
    assert frames[1] == f"{bar(1, 2)} local: 2.5".ljust(len(frames[0]))
    assert frames[2].rstrip() == f"{bar(2, 2)} nccl: 0.3"
