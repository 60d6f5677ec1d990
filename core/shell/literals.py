"""The words a setting can take that more than one layer of the shell reads.

Settings parse them, the gateway acts on `DryRun` and the runner on all three; here, so that
none of them imports another for a `Literal`.
"""

from typing import Literal

# What a write does, as kubectl's --dry-run: sent; kept back (client); sent with dryRun=All,
# so admission (policies, webhooks) answers it and nothing is persisted (server).
DryRun = Literal["none", "client", "server"]
LogLevel = Literal["debug", "info", "warning", "error"]
OutputFormat = Literal["json", "yaml", "name"]
