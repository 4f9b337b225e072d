from django.urls import URLPattern, URLResolver, path

from dashboard import consumers

websocket_urlpatterns: list[URLPattern | URLResolver] = [
    path("ws/live/cluster/", consumers.ClusterConsumer.as_asgi()),
    path("ws/live/placements/", consumers.PlacementsConsumer.as_asgi()),
    path("ws/live/queues/", consumers.QueuesConsumer.as_asgi()),
    path("ws/live/tenants/", consumers.TenantsConsumer.as_asgi()),
    path("ws/live/nodes/<str:name>/", consumers.NodeConsumer.as_asgi()),
]
