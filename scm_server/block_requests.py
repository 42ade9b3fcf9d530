"""The rules of an allocateBlock request that both ends apply, worded once.

Outside ``scm_server.block`` so the client (and the datanode simulator through it) never imports a manager
package. Called by ``scm_server.block.block_manager`` (the SCM refuses the request with INVALID_REQUEST) and by
``scm_server.client.arguments`` (the client refuses it before sending, with the same words), so a caller
sees one rule and one message whichever side catches it. Pure: no imports beyond the standard library.
"""

from __future__ import annotations

MAX_BLOCKS_KEY = "ozone.scm.block.max.blocks.per.request"


def num_blocks_problem(num_blocks: int, limit: int | None = None) -> str | None:
    """Why ``numBlocks`` cannot be allocated, or None. ``limit`` is the SCM's ``MAX_BLOCKS_KEY`` (the client does
    not know it: None checks the lower bound only)."""
    if num_blocks < 1:
        return f"numBlocks={num_blocks} must be at least 1: ask for one block or more per call"
    if limit is not None and num_blocks > limit:
        return (
            f"numBlocks={num_blocks} must be between 1 and {MAX_BLOCKS_KEY}={limit}; "
            "ask for fewer blocks per call (several calls) or raise the limit on the SCMs"
        )
    return None
