from django.urls import path

from runs.cluster_consumer import ClusterConsumer
from runs.consumers import RunConsumer

websocket_urlpatterns = [
    path("ws/runs/<int:run_id>/", RunConsumer.as_asgi()),
    path("ws/cluster/", ClusterConsumer.as_asgi()),
]
