"""A clock for the tests of code that times itself: it moves only when read or slept on, by
amounts the test chooses, so the times measured are exact on any machine, however busy."""


class ManualClock:
    """Call it to read the time. Each reading moves it `tick` seconds on, so a span between two
    readings is one tick (work takes some time); `sleep(s)` moves it `s` on, without waiting."""

    def __init__(self, tick: float = 0.0):
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
