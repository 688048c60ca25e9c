// cosmjs as a wallet or an explorer uses a chain, against a dilochain node:
//   node check.mjs RPC_URL REST_URL SENDER_KEY_HEX RECIPIENT DENOM GAS_PRICE
// connects over CometBFT's RPC, reads the chain, its validator set (CometBFT's and x/staking's)
// and a balance, sends with fee "auto" (cosmjs simulates the tx through abci_query), then reads
// the balance and the validators over REST.
// Prints one JSON line of what it found; any failure is an exception and a non-zero exit.
import { DirectSecp256k1Wallet } from "@cosmjs/proto-signing";
import {
  GasPrice, QueryClient, setupStakingExtension, SigningStargateClient, StargateClient,
} from "@cosmjs/stargate";
import { connectComet } from "@cosmjs/tendermint-rpc";

const [rpc, rest, keyHex, recipient, denom, gasPrice] = process.argv.slice(2);
const wallet = await DirectSecp256k1Wallet.fromKey(Buffer.from(keyHex, "hex"), "dilo");
const [{ address: sender }] = await wallet.getAccounts();

const reader = await StargateClient.connect(rpc);
const chainId = await reader.getChainId();
const height = await reader.getHeight();
const before = await reader.getBalance(sender, denom);
const account = await reader.getAccount(sender);

const comet = await connectComet(rpc);
const { validators } = await comet.validatorsAll();
const staking = QueryClient.withExtensions(comet, setupStakingExtension).staking;
const { validators: bonded } = await staking.validators("BOND_STATUS_BONDED");
const staked = await reader.getBalanceStaked(sender);

const signer = await SigningStargateClient.connectWithSigner(rpc, wallet, {
  gasPrice: GasPrice.fromString(`${gasPrice}${denom}`),
});
const sent = await signer.sendTokens(sender, recipient, [{ denom, amount: "12345" }], "auto");
const tx = await reader.getTx(sent.transactionHash);

const reply = await fetch(`${rest}/cosmos/bank/v1beta1/balances/${recipient}`);
const held = await reply.json();
const listed = await (await fetch(`${rest}/cosmos/staking/v1beta1/validators`)).json();

console.log(JSON.stringify({
  chainId, height, sender, senderBalance: before.amount, accountNumber: account.accountNumber,
  validators: validators.length, votingPower: validators.map((v) => Number(v.votingPower)),
  code: sent.code, gasUsed: Number(sent.gasUsed), gasWanted: Number(sent.gasWanted),
  txHeight: sent.height, found: tx !== null && tx.height === sent.height,
  restStatus: reply.status, restBalances: held.balances,
  bonded: bonded.map((v) => ({ operator: v.operatorAddress, tokens: v.tokens, jailed: v.jailed })),
  staked, restValidators: listed.validators.map((v) => v.operator_address),
}, (_, value) => (typeof value === "bigint" ? Number(value) : value)));
reader.disconnect();
signer.disconnect();
comet.disconnect();
