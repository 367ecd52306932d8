"""A launch profile seeded from a publisher's card, where the publisher gives enough.

vLLM's dashboard publishes the server's command with a result (its `server_command`, the
card's `engine.launch_flags`): it seeds a profile as a speed-test card's launch command does
(`bench.card.launch.profile_from_command`: argv the command's, less the executable's path
and an API key, GPUs its parallel sizes' product). InferenceX's dump and MLPerf's summary
give no command (InferenceX's recipe scripts hold its flags; MLPerf's harness is the
submitter's): the card's `missing` says so, and seeding refuses with that line. The
profile always runs this project's pinned vLLM image: a card of another vLLM commit or
image is a different server, which the profile's description says.
"""

from __future__ import annotations

import shlex

from bench.card.launch import profile_from_command
from bench.errors import CardError
from bench.launch_profile import LaunchProfile
from bench.publishers.model import PublisherCard


def seed_profile(card: PublisherCard, name: str) -> LaunchProfile:
    """The launch profile of CARD's server; CardError naming what the card lacks."""
    flags = card.engine.launch_flags
    if not flags:
        lacks = "; ".join(m for m in card.missing if "launch" in m.lower()) or "launch flags"
        raise CardError(
            f"{card.publisher} card {card.point_id!r} gives no launch command ({lacks[:200]}): "
            "write the launch profile by hand from the publisher's recipe"
        )
    engine = card.engine
    ran = ", ".join(
        x
        for x in (
            f"{engine.name or 'engine'} {engine.version or ''}".strip(),
            f"commit {engine.commit}" if engine.commit else "",
            f"image {engine.image}" if engine.image else "",
        )
        if x
    )
    description = (
        f"{card.model} on {card.gpu_count or '?'} x {card.gpu_model or 'GPU'} as "
        f"{card.publisher} ran it ({ran}); seeded from the card, run on this project's image"
    )
    return profile_from_command(
        f"{card.publisher}:{card.point_id}", description[:500], shlex.join(flags), name
    )
