from django.urls import path

from .consumers import PlaygroundConsumer

websocket_urlpatterns = [path("ws/playground/", PlaygroundConsumer.as_asgi())]
