#!/usr/bin/env node
import "../dist/packed/main.js";
