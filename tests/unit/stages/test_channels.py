import asyncio

import pytest

from speechpipe.stages.channels import Channel, ChannelClosed, Overflow


async def test_block_policy_makes_the_producer_wait():
    channel: Channel[int] = Channel(2, Overflow.BLOCK)
    await channel.put(1)
    await channel.put(2)
    producer = asyncio.create_task(channel.put(3))
    await asyncio.sleep(0.01)
    assert not producer.done()
    assert await channel.get() == 1
    await asyncio.wait_for(producer, 1)
    assert await channel.get_batch() == [2, 3]


async def test_coalesce_merges_instead_of_growing():
    channel: Channel[list[int]] = Channel(2, Overflow.COALESCE, merge=lambda a, b: a + b)
    for i in range(5):
        channel.put_nowait([i])
    assert len(channel) == 2
    items = await channel.get_batch()
    assert [x for item in items for x in item] == [0, 1, 2, 3, 4]  # nothing lost, order kept


async def test_latest_drops_the_oldest():
    channel: Channel[int] = Channel(2, Overflow.LATEST)
    for i in range(4):
        channel.put_nowait(i)
    assert await channel.get_batch() == [2, 3]
    assert channel.dropped == 2


async def test_close_drains_then_ends():
    channel: Channel[int] = Channel(4)
    await channel.put(1)
    channel.close()
    assert [x async for x in channel] == [1]
    with pytest.raises(ChannelClosed):
        await channel.get()
    with pytest.raises(ChannelClosed):
        await channel.put(2)


async def test_a_waiting_reader_wakes_on_close():
    channel: Channel[int] = Channel(1)
    reader = asyncio.create_task(channel.get())
    await asyncio.sleep(0.01)
    channel.close()
    with pytest.raises(ChannelClosed):
        await asyncio.wait_for(reader, 1)


def test_coalesce_needs_a_merge_function():
    with pytest.raises(ValueError):
        Channel(1, Overflow.COALESCE)
