"""A viewer that fell behind sends its queued log frames as one message (app/api/livelog.py
LogFollower.live), built from the frames' shared encodings (app/live.py Frame.joined), in order, with
state frames kept in their place and nothing lost or repeated."""

from __future__ import annotations

import asyncio
import json

from app.api.livelog import LogFollower
from app.live import Frame, LiveHub


class RecordingSocket:
    def __init__(self) -> None:
        self.sent: list[dict] = []

    async def send_text(self, text: str) -> None:
        self.sent.append(json.loads(text))


def test_joined_frames_are_one_valid_message_of_every_chunk_in_order():
    frames = [Frame("log", [(0, 'a "quoted"\n'), (1, "b\n")]), Frame("log", [(2, "c\\n")]), Frame("log", [(3, "")])]
    assert Frame.joined(frames[:1]) is frames[0].text()  # one frame: the shared text itself
    assert json.loads(Frame.joined(frames)) == {
        "type": "log",
        "chunks": [[0, 'a "quoted"\n'], [1, "b\n"], [2, "c\\n"], [3, ""]],
    }


def test_a_viewer_behind_sends_queued_frames_as_one_message_and_keeps_state_in_place():
    async def scenario() -> list[dict]:
        hub = LiveHub()
        sub = hub.subscribe(7)
        ws = RecordingSocket()
        follower = LogFollower(ws, sub, -1, db=None)  # type: ignore[arg-type]
        hub.publish_chunks(7, [(0, "l0\n"), (1, "l1\n")])
        hub.publish_chunks(7, [(2, "l2\n")])
        hub.publish_state(7, {"id": 7, "state": "running"})
        hub.publish_chunks(7, [(3, "l3\n")])
        hub.publish_chunks(7, [(2, "l2\n"), (4, "l4\n")])  # a repeat and a new one: not contiguous after 3
        task = asyncio.create_task(follower.live())
        for _ in range(20):
            await asyncio.sleep(0)
        task.cancel()
        assert sub.queued_bytes == 0 and sub.queue.empty()
        return ws.sent

    sent = asyncio.run(scenario())
    assert sent == [
        {"type": "log", "chunks": [[0, "l0\n"], [1, "l1\n"], [2, "l2\n"]]},
        {"type": "state", "id": 7, "state": "running"},
        {"type": "log", "chunks": [[3, "l3\n"], [4, "l4\n"]]},
    ]
