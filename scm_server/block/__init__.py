"""Blocks: BlockManager (allocate_block, delete_key_blocks) and the DeletedBlockLog."""
