"""Genesis documents: chain parameters, accounts and balances, validated with pydantic."""
