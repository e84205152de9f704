"""Package layout: the component folders stay at the top of the repository and install as
subpackages of ``infersight`` (``collectors/`` -> ``infersight.collectors`` ...)."""

from setuptools import find_packages, setup

COMPONENTS = ("collectors", "instrumentation", "pipelines", "dashboards", "alerts", "simulator")

packages = find_packages(include=["infersight", "infersight.*"])
package_dir = {"infersight": "infersight"}
for component in COMPONENTS:
    package_dir[f"infersight.{component}"] = component
    packages.append(f"infersight.{component}")
    packages += [f"infersight.{component}.{sub}" for sub in find_packages(where=component)]

setup(packages=packages, package_dir=package_dir)
