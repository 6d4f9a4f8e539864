"""The deploy tier shares the Kubernetes tier's real kube-apiserver fixture."""

from tests.kube.conftest import kube

__all__ = ["kube"]
