from django.urls import path

from . import recipes, views

urlpatterns = [
    path("hold/<int:pk>", views.hold),
    path("count/<int:pk>", views.count),
    path("raise/<int:pk>", views.raising),
    path("json/<int:pk>", views.json_busy),
    path("async/hold/<int:pk>", views.async_hold),
    path("async/count/<int:pk>", views.async_count),
    path("async/quick/<int:pk>", views.async_quick),
    path("report/<int:pk>", views.Report.as_view()),
    path("lost/log/<int:pk>", views.lost_log),
    path("lost/raise/<int:pk>", views.lost_raise),
    path("async/lost/<int:pk>", views.async_lost),
    path("recipes/pay/<int:pk>", recipes.pay_view),
    path("whoami", views.whoami),
    path("async/whoami", views.async_whoami),
]

if views.Api is not None:
    urlpatterns.append(path("api/<int:pk>", views.Api.as_view()))
