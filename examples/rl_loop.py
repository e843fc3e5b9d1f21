"""An RL loop on tasks and an actor: a learner actor holds the policy; rollout tasks fetch its weights (a torch state
dict) through the object store, act in a toy contextual bandit, and return their batches; the learner updates on them.

    /usr/bin/python3 examples/rl_loop.py

The bandit: an observation of 4 numbers; action 1 pays 1 when the first number is positive, action 0 otherwise.
The policy (one linear layer) learns it with REINFORCE; the mean reward rises from about 0.5 towards 1.
"""

import json

import torch

import torus

ITERATIONS = 15
ROLLOUTS = 4
STEPS = 64


def make_policy():
    return torch.nn.Linear(4, 2)


@torus.remote
class Learner:
    def __init__(self, seed):
        torch.manual_seed(seed)
        self.policy = make_policy()
        self.optimizer = torch.optim.SGD(self.policy.parameters(), lr=0.5)

    def weights(self):
        return self.policy.state_dict()

    def update(self, batch_refs):
        obs, actions, rewards = zip(*torus.get(batch_refs))
        obs, actions, rewards = torch.cat(obs), torch.cat(actions), torch.cat(rewards)
        logp = torch.log_softmax(self.policy(obs), dim=1).gather(1, actions.unsqueeze(1)).squeeze(1)
        loss = -((rewards - rewards.mean()) * logp).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return rewards.mean().item()


@torus.remote
def rollout(weights, seed):
    generator = torch.Generator().manual_seed(seed)
    policy = make_policy()
    policy.load_state_dict(weights)
    obs = torch.randn(STEPS, 4, generator=generator)
    with torch.no_grad():
        probs = torch.softmax(policy(obs), dim=1)
    actions = torch.multinomial(probs, 1, generator=generator).squeeze(1)
    rewards = (actions == (obs[:, 0] > 0).long()).float()
    return obs, actions, rewards


def main():
    torus.init()
    learner = Learner.remote(0)
    history = []
    for it in range(ITERATIONS):
        weights = learner.weights.remote()   # an ObjectRef: each rollout gets the state dict from the learner's owner
        batches = [rollout.remote(weights, it * ROLLOUTS + k) for k in range(ROLLOUTS)]
        history.append(torus.get(learner.update.remote(batches)))
        print(f"iteration {it:2d}: mean reward {history[-1]:.3f}")
    print(json.dumps({"rewards": history}))


if __name__ == "__main__":
    main()
