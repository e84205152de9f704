"""Package layout: the component folders stay at the top of the repository and install as
subpackages of ``infersight`` (``collectors/`` -> ``infersight.collectors`` ...)."""

from setuptools import Extension, find_packages, setup

COMPONENTS = ("collectors", "instrumentation", "pipelines", "dashboards", "alerts", "simulator")

packages = find_packages(include=["infersight", "infersight.*"])
package_dir = {"infersight": "infersight"}
for component in COMPONENTS:
    package_dir[f"infersight.{component}"] = component
    packages.append(f"infersight.{component}")
    packages += [f"infersight.{component}.{sub}" for sub in find_packages(where=component)]

# The token timeline's request-end work in C (instrumentation/timeline.py falls back to Python when a
# machine has no compiler: optional, so the install never fails for it).
ext_modules = [Extension("infersight.instrumentation._ctimeline", ["instrumentation/_ctimeline.c"], optional=True)]

setup(packages=packages, package_dir=package_dir, ext_modules=ext_modules)
