"""What every Redis connection of a sender or a worker is given (``dispatch.celery_config``):
a bounded connect and command, so a call to a broker gone for good does not wait on TCP's
own limits."""

from __future__ import annotations

import pytest

from rubricsvc.config import BrokerSettings
from rubricsvc.scoring import dispatch
from tests.requirements import require_module
from tests.workers_harness import REDIS_URL, redis_unavailable, require

pytestmark = pytest.mark.broker

require_module("celery", "workers")


def test_redis_connections_are_made_with_bounded_connects_and_commands() -> None:
    require(redis_unavailable())
    app = dispatch._sending_app(BrokerSettings(url=REDIS_URL).model_dump_json())
    with app.connection_for_write() as conn:
        kwargs = conn.default_channel.client.connection_pool.connection_kwargs
        assert conn.default_channel.client.ping()
    assert kwargs["socket_connect_timeout"] == dispatch.REDIS_CONNECT_TIMEOUT_SECONDS
    assert kwargs["socket_timeout"] == dispatch.REDIS_SOCKET_TIMEOUT_SECONDS
    assert kwargs["socket_keepalive"] is True


def test_other_brokers_keep_their_transports_own_options() -> None:
    """RabbitMQ's transport has its own connect timeout and heartbeats; the Redis options
    would be unknown names to it."""
    config = dispatch.celery_config(BrokerSettings(url="amqp://guest@127.0.0.1:5672//"))
    expected = {"visibility_timeout": BrokerSettings().visibility_timeout}
    assert config["broker_transport_options"] == expected
