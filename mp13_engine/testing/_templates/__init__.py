# SPDX-License-Identifier: Apache-2.0
"""The tiny model families' own chat templates (``<family>.jinja``), shipped as package data.

A package (not a plain folder) so setuptools' ``*.jinja`` package-data rule puts the
templates into wheels; ``FamilySpec.chat_template()`` reads them with ``importlib.resources``.
"""
