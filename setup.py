"""The license metadata, in the form the installed setuptools understands.

Everything else is in pyproject.toml.  An SPDX ``license = "Apache-2.0"`` there needs
setuptools >= 77, which needs Python >= 3.9, and older setuptools rejects the file
outright; vendor images on Python 3.8 must still build the tool from source.  So the
license is ``dynamic`` and set here: as a License-Expression where setuptools knows it,
as the legacy License field elsewhere.
"""

import setuptools

if int(setuptools.__version__.split(".")[0]) >= 77:
    setuptools.setup(license_expression="Apache-2.0", license_files=["LICENSE"])
else:
    setuptools.setup(license="Apache-2.0", license_files=["LICENSE"])
